//! Fuzz target `verifier`: see `csx_fuzzing::TARGETS` for what it feeds and checks.
//! Run: `make fuzz FUZZ_TARGETS=verifier FUZZ_MINUTES=N` (scripts/fuzz.sh).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    csx_fuzzing::verifier(data);
});
