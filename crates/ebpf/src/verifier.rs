//! Load-time verification. Being written (issue 2).
