//! Small raw eBPF programs the daemon's tests load as images.

/// `r1 = args->cparam1; r0 = 0; while r1 != 0 { r1 -= 1 }; exit`: a run as long as
/// cparam1 says (a data-dependent loop, so no JIT rule shortens it), returning 0.
pub const COUNT_DOWN: [u8; 48] = [
    0x79, 0x51, 0, 0, 0, 0, 0, 0, // ldxdw r1, [r5 + 0]
    0xb7, 0x00, 0, 0, 0, 0, 0, 0, // mov r0, 0
    0x15, 0x01, 2, 0, 0, 0, 0, 0, // jeq r1, 0, +2
    0x17, 0x01, 0, 0, 1, 0, 0, 0, // sub r1, 1
    0x05, 0x00, 0xfd, 0xff, 0, 0, 0, 0, // ja -3
    0x95, 0, 0, 0, 0, 0, 0, 0, // exit
];
