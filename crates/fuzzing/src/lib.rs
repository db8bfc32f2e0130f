//! The fuzz targets of csx: one function per decoder that faces untrusted bytes, each
//! taking any bytes and panicking only on a bug (a crash, or a broken invariant it
//! checks: a decoded value that does not survive re-encoding, a verified program that
//! the two engines run differently).
//!
//! ```text
//!  fuzz/fuzz_targets/NAME.rs ─┐ (libFuzzer, coverage-guided, `make fuzz`)
//!                             ├─▶ csx_fuzzing::TARGETS[NAME].run(bytes)
//!  tests/replay.rs ───────────┘ (cargo test: every file of fuzz/corpus/NAME and
//!                                fuzz/regressions/NAME, no fuzzer needed)
//! ```
//!
//! The logic lives here, in the workspace, so it builds, lints and tests with
//! everything else; `fuzz/` (outside the workspace, built with coverage
//! instrumentation by `scripts/fuzz.sh`) only wraps each function in
//! `libfuzzer_sys::fuzz_target!`.
//!
//! Invariant: a target never panics on bytes that are merely invalid: every decoder
//! must return a typed error for them.

mod targets;

pub use targets::{elf, jit_differential, shm_entries, tcp_pdu, verifier, wire};

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name of its fuzz binary and of its corpus directory.
    pub name: &'static str,
    /// What it feeds the bytes to.
    pub what: &'static str,
    /// Runs one input; panics on a bug.
    pub run: fn(&[u8]),
}

/// Every target, in the order `make fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "wire",
        what: "csx_proto::wire: command and completion frames, decoded and re-encoded",
        run: wire,
    },
    Target {
        name: "tcp_pdu",
        what: "the tcp transport's PduReader and every PDU decoder, fed in pieces",
        run: tcp_pdu,
    },
    Target {
        name: "shm_entries",
        what: "the shm transport's submission and completion entries, hello, welcome, layout",
        run: shm_entries,
    },
    Target {
        name: "elf",
        what: "csx_ebpf::loader: ELF objects, then the verifier on what loads",
        run: elf,
    },
    Target {
        name: "verifier",
        what: "raw bytecode through the verifier; what it accepts runs on both engines",
        run: verifier,
    },
    Target {
        name: "jit_differential",
        what: "generated verifiable programs, interpreter against JIT (csx_testkit::gen)",
        run: jit_differential,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
