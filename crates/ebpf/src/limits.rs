//! Bounds of the virtual machine, each with the reason it exists.
//!
//! The device's own limits live in `csx-proto`'s `limits`; these are the ones the VM
//! itself enforces and that every engine must agree on.

/// Longest program accepted, in 8-byte instructions (`lddw` counts two). Matches the
/// Linux kernel's limit for privileged programs, so anything the kernel loads, we load;
/// it also keeps verification and JIT compile time bounded.
pub const PROGRAM_INSN_COUNT_MAX: usize = 1_000_000;

/// Bytes of stack a single frame may use, as in the kernel (`MAX_BPF_STACK`). clang's
/// BPF backend refuses to build functions that need more.
pub const STACK_FRAME_SIZE: usize = 512;

/// Frames that may be live at once, the entry function included. Same as the kernel's
/// `MAX_CALL_FRAMES`: deep enough for real programs, small enough that the whole stack
/// (see [`STACK_SIZE`]) is cheap to zero before every run.
pub const CALL_DEPTH_MAX: usize = 8;

/// Bytes of the stack region: one frame per permitted call depth.
pub const STACK_SIZE: usize = STACK_FRAME_SIZE * CALL_DEPTH_MAX;

/// Entries in the region table. The region index is the high half of a virtual
/// address, so this also bounds which high halves are meaningful.
pub const REGIONS_MAX: usize = 32;

/// Largest region, in bytes: a region offset is the low 32 bits of a virtual address.
pub const REGION_SIZE_MAX: u64 = u32::MAX as u64;

/// Fuel a run gets when the caller does not choose: a one-instruction spin (`ja -1`,
/// one fuel per iteration, the most iterations per fuel) runs out of it within a second
/// on both engines. Measured on the 2-vCPU AMD EPYC these sessions use: the interpreter
/// spins at about 4.3 × 10^8 fuel per CPU second, the JIT at about 1.7 × 10^9 (see
/// `docs/benchmarks.md`), so 2 × 10^8 is about 0.47 s and 0.12 s. Work that needs more
/// asks for it (up to `FUEL_MAX` of the protocol).
pub const FUEL_DEFAULT: u64 = 200_000_000;

/// Global data sections (`.rodata*`, `.data*`, `.bss*`) one program may map.
pub const GLOBAL_SECTIONS_MAX: usize = crate::memory::RegionIdx::GLOBALS_COUNT as usize;

/// Largest global data section, in bytes. Writable sections are copied fresh for every
/// run, so they must stay small.
pub const GLOBAL_SECTION_SIZE_MAX: usize = 1 << 20;

/// Function-table entries: helper ids are dense small integers in practice.
pub const FUNCTIONS_MAX: usize = 1024;

const _: () = assert!(STACK_SIZE.is_multiple_of(8));
const _: () = assert!(GLOBAL_SECTION_SIZE_MAX as u64 <= REGION_SIZE_MAX);
