//! The streaming operator contract (Metal FS's operators on csx): a device program that
//! transforms a stream chunk by chunk. `csx pipe` and the mount's `.ops/` executables
//! call an operator once per chunk, in stream order, with
//!
//! ```text
//! window 0 (OP_WINDOW_IN)     the input buffer: the chunk is its first cparam2 bytes
//! window 1 (OP_WINDOW_OUT)    the output buffer: its length is the capacity
//! window 2 (OP_WINDOW_STATE)  the per-stream state: zeroed before the first chunk, kept
//!                             across the stream's chunks, private to this stage
//! cparam1                     OP_FIRST on the stream's first call, OP_LAST on the calls
//!                             of its last chunk (both on a one-chunk stream)
//! cparam2                     the input chunk's bytes (possibly 0; at most window 0's
//!                             length: a memory range is never empty, so the buffer is
//!                             passed whole and the chunk's length beside it)
//! params                      the operator's typed parameters, at the offsets its
//!                             catalogue entry gives (little-endian; bool and int are 8 bytes)
//! ```
//!
//! It returns the bytes it wrote to the output, or those ORed with [`OP_AGAIN`]: "call
//! me again with the same input and a fresh output buffer" (an operator whose output
//! does not fit keeps its place in its state). A negative `CSX_E*` code, or a trap,
//! stops the stream. The header states the same for C ([`super::header`]).

/// Bit of cparam1: the stream's first call.
pub const OP_FIRST: u64 = 1;
/// Bit of cparam1: the input is the stream's last chunk.
pub const OP_LAST: u64 = 2;
/// Bit of r0: call again with the same input (the output was full).
pub const OP_AGAIN: u64 = 1 << 40;
/// The bits of r0 below [`OP_AGAIN`]: the output bytes.
pub const OP_LEN_MASK: u64 = OP_AGAIN - 1;
/// Window of the input chunk.
pub const OP_WINDOW_IN: u32 = 0;
/// Window of the output buffer.
pub const OP_WINDOW_OUT: u32 = 1;
/// Window of the per-stream state.
pub const OP_WINDOW_STATE: u32 = 2;

/// Header of a `csx_lz4` stream frame: u32 raw bytes, u32 compressed bytes (little-endian),
/// then the LZ4 block.
pub const LZ4_FRAME_HEADER: usize = 8;
/// Largest raw size of one `csx_lz4` frame.
pub const LZ4_FRAME_RAW_MAX: usize = 1 << 20;

/// Bytes of a ChaCha20 key followed by its 12-byte nonce (`csx_chacha20`).
pub const CHACHA20_KEY_NONCE: usize = 32 + 12;

/// Output room `csx_lz4_compress` asks for `n` raw bytes: above LZ4's worst case
/// (n + n/255 + 16) with the margin the encoder wants.
pub const fn lz4_bound(n: usize) -> usize {
    n + n / 10 + 32
}
