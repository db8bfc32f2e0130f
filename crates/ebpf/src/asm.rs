//! Assembler for the text syntax of the bpf_conformance `.data` files (used by tests).
//! Being written (issue 2).
