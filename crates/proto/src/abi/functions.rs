//! The registered device functions: the native code programs call as `extern` C
//! functions (the immediate of `call imm` is the id), with the C declaration, the
//! argument kinds the VM checks pointers against before a call, a version and a
//! one-line doc.
//!
//! Invariant: a function never changes meaning under its id or name; a new contract
//! gets a new name and id. The device implements exactly [`FUNCTIONS`] (a test in
//! `csx_device::functions` calls each id).

use crate::completion::{FunctionInfo, WireArgKind};
use crate::ids::FunctionId;

/// Function ids. Stable: part of the program ABI.
pub const CSX_FILE_SIZE: u32 = 1;
pub const CSX_FILE_READ: u32 = 2;
pub const CSX_FILE_WRITE: u32 = 3;
pub const CSX_MEMCPY: u32 = 4;
pub const CSX_MEMSET: u32 = 5;
pub const CSX_NOW_NS: u32 = 6;
pub const CSX_TRACE: u32 = 7;
pub const CSX_FILTER_U32: u32 = 16;
pub const CSX_FILTER_U64: u32 = 17;
pub const CSX_SORT_U64: u32 = 18;
pub const CSX_MERGE_U64: u32 = 19;
pub const CSX_LZ4_DECOMPRESS: u32 = 20;
pub const CSX_LZ4_COMPRESS: u32 = 21;
pub const CSX_CHACHA20: u32 = 22;
pub const CSX_MERGE_INTO_U64: u32 = 23;
pub const CSX_MERGE_RUNS_U64: u32 = 24;
pub const CSX_UNPACK: u32 = 25;
/// csx_unpack's `first_row` argument: the output width asked for in its top byte (0:
/// the blocks' own), the first row below it.
pub const CSX_UNPACK_AS_SHIFT: u32 = 56;

/// One registered function's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionSpec {
    pub id: u32,
    pub name: &'static str,
    pub args: &'static [WireArgKind],
    pub version: u32,
    pub c_decl: &'static str,
    pub doc: &'static str,
}

impl FunctionSpec {
    /// The entry as a device publishes it (List Functions).
    pub fn info(&self) -> FunctionInfo {
        FunctionInfo {
            id: FunctionId(self.id),
            name: self.name.to_string(),
            args: self.args.to_vec(),
            version: self.version,
            c_decl: self.c_decl.to_string(),
            doc: self.doc.to_string(),
        }
    }
}

use WireArgKind::{PtrIn, PtrOut, Scalar};

/// Every registered function, in id order.
pub const FUNCTIONS: &[FunctionSpec] = &[
    FunctionSpec {
        id: CSX_FILE_SIZE,
        name: "csx_file_size",
        args: &[PtrIn { len_arg: 1 }, Scalar],
        version: 1,
        c_decl: "long csx_file_size(const char *path, unsigned long path_len);",
        doc: "size in bytes of the device file at path, or a negative CSX_E* code",
    },
    FunctionSpec {
        id: CSX_FILE_READ,
        name: "csx_file_read",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, PtrOut { len_arg: 4 }, Scalar],
        version: 1,
        c_decl: "long csx_file_read(const char *path, unsigned long path_len, unsigned long offset, void *dst, unsigned long len);",
        doc: "reads up to len bytes of a device file at offset into dst; returns bytes read (short at end of file)",
    },
    FunctionSpec {
        id: CSX_FILE_WRITE,
        name: "csx_file_write",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, PtrIn { len_arg: 4 }, Scalar],
        version: 1,
        c_decl: "long csx_file_write(const char *path, unsigned long path_len, unsigned long offset, const void *src, unsigned long len);",
        doc: "writes len bytes from src to a device file at offset, creating or extending it; returns bytes written",
    },
    FunctionSpec {
        id: CSX_MEMCPY,
        name: "csx_memcpy",
        args: &[PtrOut { len_arg: 2 }, PtrIn { len_arg: 2 }, Scalar],
        version: 1,
        c_decl: "long csx_memcpy(void *dst, const void *src, unsigned long len);",
        doc: "copies len bytes (ranges may overlap) between any mapped memory; returns len",
    },
    FunctionSpec {
        id: CSX_MEMSET,
        name: "csx_memset",
        args: &[PtrOut { len_arg: 2 }, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_memset(void *dst, unsigned long byte, unsigned long len);",
        doc: "sets len bytes at dst to the low byte of byte; returns len",
    },
    FunctionSpec {
        id: CSX_NOW_NS,
        name: "csx_now_ns",
        args: &[],
        version: 1,
        c_decl: "unsigned long csx_now_ns(void);",
        doc: "monotonic nanoseconds since the device opened",
    },
    FunctionSpec {
        id: CSX_TRACE,
        name: "csx_trace",
        args: &[PtrIn { len_arg: 1 }, Scalar],
        version: 1,
        c_decl: "long csx_trace(const char *msg, unsigned long len);",
        doc: "appends a message (at most 256 bytes kept, 64 per run) to the completion's trace; 0 or CSX_ENOSPC",
    },
    FunctionSpec {
        id: CSX_FILTER_U32,
        name: "csx_filter_u32",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_filter_u32(const void *src, unsigned long len, unsigned long op, unsigned long operand, void *bitmap);",
        doc: "accelerated filter: bit i of bitmap (ceil(len/32) bytes) = src[i] OP operand over len/4 u32s; returns matches",
    },
    FunctionSpec {
        id: CSX_FILTER_U64,
        name: "csx_filter_u64",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_filter_u64(const void *src, unsigned long len, unsigned long op, unsigned long operand, void *bitmap);",
        doc: "accelerated filter: bit i of bitmap (ceil(len/64) bytes) = src[i] OP operand over len/8 u64s; returns matches",
    },
    FunctionSpec {
        id: CSX_SORT_U64,
        name: "csx_sort_u64",
        args: &[PtrOut { len_arg: 1 }, Scalar],
        version: 1,
        c_decl: "long csx_sort_u64(void *data, unsigned long len);",
        doc: "accelerated sort of len/8 little-endian u64s in place, ascending; returns the count",
    },
    FunctionSpec {
        id: CSX_MERGE_U64,
        name: "csx_merge_u64",
        args: &[PtrOut { len_arg: 1 }, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_merge_u64(void *data, unsigned long len, unsigned long split);",
        doc: "accelerated merge of the sorted u64 runs data[0, split) and data[split, len) in place, ascending; returns the count",
    },
    FunctionSpec {
        id: CSX_LZ4_DECOMPRESS,
        name: "csx_lz4_decompress",
        args: &[PtrIn { len_arg: 1 }, Scalar, PtrOut { len_arg: 3 }, Scalar],
        version: 1,
        c_decl: "long csx_lz4_decompress(const void *src, unsigned long src_len, void *dst, unsigned long dst_len);",
        doc: "accelerated LZ4 block decompression of src into dst; returns the decompressed bytes, CSX_EBADMSG for a corrupt block, CSX_ENOSPC when dst is too small",
    },
    FunctionSpec {
        id: CSX_LZ4_COMPRESS,
        name: "csx_lz4_compress",
        args: &[PtrIn { len_arg: 1 }, Scalar, PtrOut { len_arg: 3 }, Scalar],
        version: 1,
        c_decl: "long csx_lz4_compress(const void *src, unsigned long src_len, void *dst, unsigned long dst_len);",
        doc: "accelerated LZ4 block compression of src into dst (dst_len at least src_len + src_len/10 + 32); returns the compressed bytes or CSX_ENOSPC",
    },
    FunctionSpec {
        id: CSX_CHACHA20,
        name: "csx_chacha20",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, PtrOut { len_arg: 4 }, Scalar],
        version: 1,
        c_decl: "long csx_chacha20(const void *key_nonce, unsigned long key_nonce_len, unsigned long offset, void *data, unsigned long len);",
        doc: "accelerated ChaCha20 (RFC 8439): XORs len bytes of data in place with the keystream of the 32-byte key and 12-byte nonce at key_nonce (key_nonce_len 44) from stream byte offset; returns len",
    },
    FunctionSpec {
        id: CSX_MERGE_INTO_U64,
        name: "csx_merge_into_u64",
        args: &[PtrIn { len_arg: 1 }, Scalar, PtrIn { len_arg: 3 }, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_merge_into_u64(const void *a, unsigned long a_len, const void *b, unsigned long b_len, void *out);",
        doc: "accelerated merge of the sorted u64 runs a and b into out (a_len + b_len bytes, overlapping neither), ascending; returns the count",
    },
    FunctionSpec {
        id: CSX_MERGE_RUNS_U64,
        name: "csx_merge_runs_u64",
        args: &[PtrOut { len_arg: 1 }, Scalar, Scalar, Scalar, Scalar],
        version: 1,
        c_decl: "long csx_merge_runs_u64(void *out, unsigned long out_len, const void *runs, unsigned long n, unsigned long *taken);",
        doc: "accelerated multiway merge: the first out_len/8 keys of the n (1 to 16) sorted u64 runs described at runs ({const void *addr; unsigned long len;} each, as args->windows) into out, ties from the lower run first; taken[i] gets the keys used from run i; returns the keys written",
    },
    FunctionSpec {
        id: CSX_UNPACK,
        name: "csx_unpack",
        args: &[PtrIn { len_arg: 1 }, Scalar, Scalar, PtrOut { len_arg: 4 }, Scalar],
        version: 2,
        c_decl: "long csx_unpack(const void *blocks, unsigned long blocks_len, unsigned long first_row, void *dst, unsigned long dst_len);",
        doc: "expands encoded column blocks (the columnar format's version 2, stored back to back at blocks) into plain values: rows first_row .. first_row + dst_len/width into dst; each block's header and payload CRC-32C checked before it is decoded; returns the rows written, or CSX_EBADMSG for a bad block or rows past the blocks (the detail names the block's byte offset in blocks and the bad part). Version 2: first_row's top byte (CSX_UNPACK_AS_SHIFT, 56) may ask for values of 4 bytes from blocks of 8 whose zone maps fit 4 (0: the blocks' width); a block that does not fit is CSX_EBADMSG",
    },
];

/// Every registered function as a device publishes it.
pub fn infos() -> Vec<FunctionInfo> {
    FUNCTIONS.iter().map(FunctionSpec::info).collect()
}

/// The function with this id.
pub fn by_id(id: u32) -> Option<&'static FunctionSpec> {
    FUNCTIONS.iter().find(|f| f.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_declarations_match() {
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for (i, f) in FUNCTIONS.iter().enumerate() {
            assert!(ids.insert(f.id), "duplicate id {}", f.id);
            assert!(names.insert(f.name), "duplicate name {}", f.name);
            assert!(i == 0 || FUNCTIONS[i - 1].id < f.id, "not in id order");
            assert!(f.name.starts_with("csx_"), "{}", f.name);
            assert!(f.c_decl.contains(&format!(" {}(", f.name)), "{}", f.c_decl);
            assert!(f.c_decl.ends_with(");"), "{}", f.c_decl);
            assert!(f.args.len() <= 5, "{} takes {} args", f.name, f.args.len());
            // The C parameter count matches the argument kinds.
            let params = &f.c_decl[f.c_decl.find('(').unwrap() + 1..f.c_decl.len() - 2];
            let count = if params == "void" {
                0
            } else {
                params.split(',').count()
            };
            assert_eq!(count, f.args.len(), "{}", f.name);
            for a in f.args {
                if let PtrIn { len_arg } | PtrOut { len_arg } = a {
                    assert!(
                        matches!(f.args.get(*len_arg as usize), Some(Scalar)),
                        "{}: the length of a pointer is a scalar argument",
                        f.name
                    );
                }
            }
            assert_eq!(by_id(f.id), Some(f));
        }
        assert_eq!(infos().len(), FUNCTIONS.len());
    }
}
