//! Fuzz target `jit_differential`: see `csx_fuzzing::TARGETS` for what it feeds and checks.
//! Run: `make fuzz FUZZ_TARGETS=jit_differential FUZZ_MINUTES=N` (scripts/fuzz.sh).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    csx_fuzzing::jit_differential(data);
});
