//! csx-it has no library: its tests (`tests/it`) run the host API on every transport
//! (embedded, embedded with wire encoding, shm and tcp to a `csx-server` daemon), the
//! daemon itself and λ-IO, on real devices in temporary directories.
