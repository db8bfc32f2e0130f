//! Placeholder; filled in by its issue.
