//! What the shm and tcp framings share: little-endian fields at fixed offsets, and
//! human-readable messages clipped to their limit.
//!
//! Callers check lengths first; an offset past the slice is a programmer error and
//! panics (as slice indexing does).

/// The `u16` at `b[at..at + 2]`.
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at `b[at..at + 4]`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at `b[at..at + 8]`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Writes `v` at `b[at..at + 2]`.
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at `b[at..at + 4]`.
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at `b[at..at + 8]`.
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The first bytes of `message`, at most `limit`, cut at a character boundary.
pub(crate) fn clip_message(message: &str, limit: usize) -> &[u8] {
    let mut end = message.len().min(limit);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message.as_bytes()[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_little_endian() {
        let mut b = [0u8; 16];
        put16(&mut b, 0, 0x0102);
        put32(&mut b, 2, 0x0304_0506);
        put64(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        assert_eq!(&b[..4], &[0x02, 0x01, 0x06, 0x05]);
        assert_eq!(u16_at(&b, 0), 0x0102);
        assert_eq!(u32_at(&b, 2), 0x0304_0506);
        assert_eq!(u64_at(&b, 6), 0x0708_090a_0b0c_0d0e);
    }

    #[test]
    fn messages_are_clipped_at_a_character() {
        assert_eq!(clip_message("abc", 8), b"abc");
        assert_eq!(clip_message("abc", 2), b"ab");
        // "é" is two bytes: a limit inside it drops it whole.
        assert_eq!(clip_message("aé", 2), b"a");
    }
}
