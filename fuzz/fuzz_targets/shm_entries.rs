//! Fuzz target `shm_entries`: see `csx_fuzzing::TARGETS` for what it feeds and checks.
//! Run: `make fuzz FUZZ_TARGETS=shm_entries FUZZ_MINUTES=N` (scripts/fuzz.sh).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    csx_fuzzing::shm_entries(data);
});
