//! The reference interpreter. Being written (issue 2).
