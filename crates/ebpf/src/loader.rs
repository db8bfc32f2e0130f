//! Raw bytecode and ELF relocatable object loading. Being written (issue 2).
