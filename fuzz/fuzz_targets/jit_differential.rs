//! Fuzzes the JIT against the reference interpreter: libFuzzer's bytes become a
//! verifiable program, memory and fuel budget (`csx_testkit::gen`), which must give the
//! same r0 or trap, fuel and memory on both engines.
//!
//! Run: `cargo +nightly fuzz run jit_differential` from this directory.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    csx_testkit::gen::check_bytes(data);
});
