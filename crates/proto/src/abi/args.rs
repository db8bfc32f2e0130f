//! `struct csx_args`: the read-only argument block r5 points to (C layout,
//! little-endian). [`FIELDS`] is the layout; [`encode`] writes a block by it, and the
//! SDK header's `_Static_assert`s are generated from it.

use crate::limits::{ARGS_HEADER_SIZE, PARAMS_SIZE_MAX, WINDOWS_MAX};

/// One field of `struct csx_args`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgsField {
    /// The C name.
    pub name: &'static str,
    /// Byte offset from the start of the block.
    pub offset: usize,
    /// Bytes; 0 for the flexible array `params`.
    pub size: usize,
    /// What the field holds.
    pub doc: &'static str,
}

/// Offset of `cparam1` (u64).
pub const CPARAM1_OFFSET: usize = 0;
/// Offset of `cparam2` (u64).
pub const CPARAM2_OFFSET: usize = 8;
/// Offset of `nwindows` (u32).
pub const NWINDOWS_OFFSET: usize = 16;
/// Offset of `params_len` (u32).
pub const PARAMS_LEN_OFFSET: usize = 20;
/// Offset of `windows[WINDOWS_MAX]`, each `struct csx_window { u64 addr; u64 len; }`.
pub const WINDOWS_OFFSET: usize = 24;
/// Bytes of one `struct csx_window`.
pub const WINDOW_SIZE: usize = 16;
/// Offset of the flexible array `params[]`: the end of the fixed part.
pub const PARAMS_OFFSET: usize = WINDOWS_OFFSET + WINDOWS_MAX * WINDOW_SIZE;

const _: () = assert!(PARAMS_OFFSET == ARGS_HEADER_SIZE);
const _: () = assert!(PARAMS_OFFSET == 280);

/// The fields in offset order.
pub const FIELDS: &[ArgsField] = &[
    ArgsField {
        name: "cparam1",
        offset: CPARAM1_OFFSET,
        size: 8,
        doc: "",
    },
    ArgsField {
        name: "cparam2",
        offset: CPARAM2_OFFSET,
        size: 8,
        doc: "",
    },
    ArgsField {
        name: "nwindows",
        offset: NWINDOWS_OFFSET,
        size: 4,
        doc: "windows in use (windows[nwindows..] are zero)",
    },
    ArgsField {
        name: "params_len",
        offset: PARAMS_LEN_OFFSET,
        size: 4,
        doc: "bytes in params",
    },
    ArgsField {
        name: "windows",
        offset: WINDOWS_OFFSET,
        size: WINDOWS_MAX * WINDOW_SIZE,
        doc: "",
    },
    ArgsField {
        name: "params",
        offset: PARAMS_OFFSET,
        size: 0,
        doc: "the command's parameter bytes",
    },
];

/// `struct csx_args` for windows of `window_lens` bytes (window `i` at
/// [`super::window_base`]`(i)`) and the parameter bytes `params`.
///
/// Panics when there are more than [`WINDOWS_MAX`] windows or more than
/// [`PARAMS_SIZE_MAX`] parameter bytes: callers validate commands first
/// (`Command::validate`), so either is a bug.
pub fn encode(cparam1: u64, cparam2: u64, window_lens: &[u64], params: &[u8]) -> Vec<u8> {
    assert!(window_lens.len() <= WINDOWS_MAX, "too many windows");
    assert!(params.len() <= PARAMS_SIZE_MAX, "too many parameter bytes");
    let mut a = vec![0u8; PARAMS_OFFSET + params.len()];
    let mut put = |at: usize, bytes: &[u8]| a[at..at + bytes.len()].copy_from_slice(bytes);
    put(CPARAM1_OFFSET, &cparam1.to_le_bytes());
    put(CPARAM2_OFFSET, &cparam2.to_le_bytes());
    put(NWINDOWS_OFFSET, &(window_lens.len() as u32).to_le_bytes());
    put(PARAMS_LEN_OFFSET, &(params.len() as u32).to_le_bytes());
    for (i, len) in window_lens.iter().enumerate() {
        let at = WINDOWS_OFFSET + i * WINDOW_SIZE;
        put(at, &super::window_base(i).to_le_bytes());
        put(at + 8, &len.to_le_bytes());
    }
    put(PARAMS_OFFSET, params);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(a: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(a[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn fields_tile_the_block() {
        let mut end = 0;
        for f in FIELDS {
            assert_eq!(
                f.offset, end,
                "{} is not right after the previous field",
                f.name
            );
            end = f.offset + f.size;
        }
        assert_eq!(end, PARAMS_OFFSET);
    }

    #[test]
    fn encode_follows_the_layout() {
        let a = encode(1, 2, &[10, 20], b"xyz");
        assert_eq!(a.len(), 283);
        assert_eq!(u64_at(&a, 0), 1);
        assert_eq!(u64_at(&a, 8), 2);
        assert_eq!(u32::from_le_bytes(a[16..20].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(a[20..24].try_into().unwrap()), 3);
        assert_eq!(u64_at(&a, 24), 4 << 32);
        assert_eq!(u64_at(&a, 32), 10);
        assert_eq!(u64_at(&a, 40), 5 << 32);
        assert_eq!(u64_at(&a, 48), 20);
        assert!(a[56..280].iter().all(|&b| b == 0));
        assert_eq!(&a[280..], b"xyz");
    }
}
