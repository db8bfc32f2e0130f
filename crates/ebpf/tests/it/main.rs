//! csx-ebpf integration tests, one binary with a module per topic.

mod asm_conformance;
mod loader;
