//! csx-testkit integration tests: one binary, one module per topic.

mod conformance;
mod differential;
mod vectors;
