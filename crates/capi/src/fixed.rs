//! Fixed CSF ids: numbers a program calls a CSF by without looking it up (a public demo
//! calls its vendor's function 100), reserved for a persistent program's name with
//! `csx program load NAME FILE --id N` (or [`reserve`]).
//!
//! A CSF id is otherwise the program slot the device chose, which a program cannot know
//! in advance and which changes when the program is loaded again. A fixed id belongs to
//! the *name*: it is kept in the device's file store at [`FIXED_IDS_PATH`], one
//! `ID NAME` line each, so it survives restarts of the device and reloads of the program
//! into another slot, and every transport (embedded, shm, tcp) sees the same table. Fixed
//! ids lie above the slots and below the built-in CSFs
//! ([`FIXED_ID_MIN`]`..=`[`FIXED_ID_MAX`]), so no id means two things.

use csx_host::proto::limits::PROGRAM_SLOTS_COUNT;
use csx_host::{CallError, Device};

use crate::api::CSX_BUILTIN_CSF_BASE;

/// The library's own directory in the device's file store.
pub const LIBRARY_DIR: &str = "/.csx";

/// Where the table lives in the device's file store.
pub const FIXED_IDS_PATH: &str = "/.csx/csf-ids";

/// Whether a listing of `dir` shows `path`: the library's directory ([`LIBRARY_DIR`]) is
/// left out of listings of the directories above it (`csx ls /`), and is still listed
/// and read by its exact path.
pub fn listed(dir: &str, path: &str) -> bool {
    let inside = |p: &str| {
        p.strip_prefix(LIBRARY_DIR)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    !inside(path) || inside(dir.trim_end_matches('/'))
}

/// The smallest fixed id: the first past the program slots.
pub const FIXED_ID_MIN: u32 = PROGRAM_SLOTS_COUNT as u32;

/// The largest fixed id: the last below the built-in CSFs.
pub const FIXED_ID_MAX: u32 = CSX_BUILTIN_CSF_BASE - 1;

/// Bytes the table may hold (far more than the ids a device can use: one line per name
/// of at most 64 bytes).
pub const FIXED_IDS_SIZE_MAX: u64 = 1 << 20;

/// Why an id could not be reserved or the table read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixedIdError {
    #[error("CSF id {id} is not a fixed id ({FIXED_ID_MIN}..={FIXED_ID_MAX}: above the {FIXED_ID_MIN} program slots, below the built-in CSFs)")]
    OutOfRange { id: u32 },
    #[error("CSF id {id} is already reserved for {holder:?}")]
    Taken { id: u32, holder: String },
    #[error("{FIXED_IDS_PATH} line {line}: {text:?} is not `ID NAME`")]
    Malformed { line: usize, text: String },
    #[error("{FIXED_IDS_PATH} holds {size} bytes, more than {FIXED_IDS_SIZE_MAX}")]
    TooLarge { size: u64 },
    #[error(transparent)]
    Device(#[from] CallError),
}

/// Whether `id` is in the fixed range.
pub fn is_fixed(id: u32) -> bool {
    (FIXED_ID_MIN..=FIXED_ID_MAX).contains(&id)
}

/// The table's `(id, name)` pairs from its text.
pub fn parse(text: &str) -> Result<Vec<(u32, String)>, FixedIdError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || FixedIdError::Malformed {
            line: i + 1,
            text: line.to_string(),
        };
        let mut words = line.split_whitespace();
        let (Some(id), Some(name), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad());
        };
        let id: u32 = id.parse().map_err(|_| bad())?;
        if !is_fixed(id) {
            return Err(bad());
        }
        out.push((id, name.to_string()));
    }
    Ok(out)
}

/// The device's table (empty when it has none).
pub fn read(device: &Device) -> Result<Vec<(u32, String)>, FixedIdError> {
    let size = match device.stat(FIXED_IDS_PATH) {
        Ok(info) => info.size_bytes,
        Err(CallError::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    if size > FIXED_IDS_SIZE_MAX {
        return Err(FixedIdError::TooLarge { size });
    }
    let bytes = device.read_file(FIXED_IDS_PATH, 0, size)?;
    parse(&String::from_utf8_lossy(&bytes))
}

/// The name `id` is reserved for in `table`, if any.
pub fn id_of_name(table: &[(u32, String)], id: u32) -> Option<String> {
    table.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone())
}

/// The id reserved for `name`, if any.
pub fn id_of(table: &[(u32, String)], name: &str) -> Option<u32> {
    table.iter().find(|(_, n)| n == name).map(|(i, _)| *i)
}

/// Reserves `id` for `name` (a name holds one id: its old one is released). Refused
/// when another name holds `id`.
pub fn reserve(device: &Device, id: u32, name: &str) -> Result<(), FixedIdError> {
    if !is_fixed(id) {
        return Err(FixedIdError::OutOfRange { id });
    }
    let mut table = read(device)?;
    if let Some((_, holder)) = table.iter().find(|(i, n)| *i == id && n != name) {
        return Err(FixedIdError::Taken {
            id,
            holder: holder.clone(),
        });
    }
    table.retain(|(_, n)| n != name);
    table.push((id, name.to_string()));
    table.sort();
    let text: String = table.iter().map(|(i, n)| format!("{i} {n}\n")).collect();
    match device.mkdir(LIBRARY_DIR) {
        Ok(()) | Err(CallError::FileExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // Replaced whole (the file store's put is all or nothing).
    device.put_bytes(FIXED_IDS_PATH, text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_refuses_what_is_not_an_id_and_a_name() {
        assert_eq!(
            parse("100 sleep\n\n4096 checksum\n").unwrap(),
            [(100, "sleep".to_string()), (4096, "checksum".to_string())]
        );
        for bad in ["100", "100 a b", "x sleep", "3 slot", "65536 builtin"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("line 1") && e.contains(bad), "{e}");
        }
        assert!(is_fixed(64) && is_fixed(65535) && !is_fixed(63) && !is_fixed(65536));
    }

    #[test]
    fn the_library_directory_is_listed_only_from_inside() {
        for dir in ["/", ""] {
            assert!(!listed(dir, "/.csx/csf-ids"), "{dir:?}");
            assert!(!listed(dir, "/.csx"), "{dir:?}");
            assert!(listed(dir, "/.csxdata"), "{dir:?}");
            assert!(listed(dir, "/data/.csx/x"), "{dir:?}");
        }
        for dir in ["/.csx", "/.csx/"] {
            assert!(listed(dir, "/.csx/csf-ids"), "{dir:?}");
        }
    }
}
