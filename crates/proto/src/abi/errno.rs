//! The negative codes registered device functions return to programs (and report in a
//! completion's error detail). The values are Linux errno numbers, negated, so C
//! programmers read them at a glance. Part of the program ABI.

/// Not permitted (a write to a read-only path).
pub const CSX_EPERM: i64 = -1;
/// No such file.
pub const CSX_ENOENT: i64 = -2;
/// Storage I/O failed.
pub const CSX_EIO: i64 = -5;
/// An argument list or buffer is too long.
pub const CSX_E2BIG: i64 = -7;
/// Out of device memory.
pub const CSX_ENOMEM: i64 = -12;
/// A pointer argument does not cover the bytes the function needs.
pub const CSX_EFAULT: i64 = -14;
/// The target is busy.
pub const CSX_EBUSY: i64 = -16;
/// The file exists.
pub const CSX_EEXIST: i64 = -17;
/// A path component that must be a directory is a file.
pub const CSX_ENOTDIR: i64 = -20;
/// The path is a directory where a file is needed.
pub const CSX_EISDIR: i64 = -21;
/// An argument is invalid (bad operator, misaligned length, bad UTF-8 path).
pub const CSX_EINVAL: i64 = -22;
/// The file is too large, or an offset plus length overflows.
pub const CSX_EFBIG: i64 = -27;
/// The namespace (or a bounded buffer such as the trace log) is full.
pub const CSX_ENOSPC: i64 = -28;
/// A value is out of range.
pub const CSX_ERANGE: i64 = -34;
/// A path is longer than the device allows.
pub const CSX_ENAMETOOLONG: i64 = -36;
/// The function is not implemented on this device.
pub const CSX_ENOSYS: i64 = -38;
/// The device's data is corrupt.
pub const CSX_EBADMSG: i64 = -74;

/// The C name of a code, for messages and the SDK header.
pub fn name(code: i64) -> &'static str {
    match code {
        CSX_EPERM => "CSX_EPERM",
        CSX_ENOENT => "CSX_ENOENT",
        CSX_EIO => "CSX_EIO",
        CSX_E2BIG => "CSX_E2BIG",
        CSX_ENOMEM => "CSX_ENOMEM",
        CSX_EFAULT => "CSX_EFAULT",
        CSX_EBUSY => "CSX_EBUSY",
        CSX_EEXIST => "CSX_EEXIST",
        CSX_ENOTDIR => "CSX_ENOTDIR",
        CSX_EISDIR => "CSX_EISDIR",
        CSX_EINVAL => "CSX_EINVAL",
        CSX_EFBIG => "CSX_EFBIG",
        CSX_ENOSPC => "CSX_ENOSPC",
        CSX_ERANGE => "CSX_ERANGE",
        CSX_ENAMETOOLONG => "CSX_ENAMETOOLONG",
        CSX_ENOSYS => "CSX_ENOSYS",
        CSX_EBADMSG => "CSX_EBADMSG",
        _ => "CSX_E?",
    }
}

/// Every code, for generating the SDK header.
pub const ALL: &[i64] = &[
    CSX_EPERM,
    CSX_ENOENT,
    CSX_EIO,
    CSX_E2BIG,
    CSX_ENOMEM,
    CSX_EFAULT,
    CSX_EBUSY,
    CSX_EEXIST,
    CSX_ENOTDIR,
    CSX_EISDIR,
    CSX_EINVAL,
    CSX_EFBIG,
    CSX_ENOSPC,
    CSX_ERANGE,
    CSX_ENAMETOOLONG,
    CSX_ENOSYS,
    CSX_EBADMSG,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_negative_named_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for &c in ALL {
            assert!(c < 0);
            assert_ne!(name(c), "CSX_E?");
            assert!(seen.insert(c), "duplicate code {c}");
        }
        assert_eq!(name(-9999), "CSX_E?");
    }
}
