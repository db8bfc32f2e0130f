//! Compiles an eBPF ELF object with the JIT (a debugging aid): `CSX_JIT_DISASM=1 cargo
//! run -p csx-ebpf-jit --example jit_dump -- prog.o` prints Cranelift's disassembly.

use std::sync::Arc;

fn main() {
    let path = std::env::args().nth(1).expect("usage: jit_dump PROG.o");
    let bytes = std::fs::read(&path).expect("readable object");
    let table = Arc::new(csx_ebpf::helper::FunctionTable::new());
    let program = csx_ebpf::loader::load_elf(&bytes, None, &table).expect("loadable object");
    let verified = csx_ebpf::verifier::verify(program, table).expect("verifiable program");
    let jit = csx_ebpf_jit::JitProgram::compile(Arc::new(verified)).expect("compiles");
    println!(
        "{} bytes of code in {:?}",
        jit.code_size(),
        jit.compile_time()
    );
}
