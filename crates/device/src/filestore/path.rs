//! Device paths: validation and the one canonical spelling of each path.
//!
//! The file store's namespace is flat: a file is named by a `/`-separated path and
//! directories exist only as prefixes of file paths. Every path is normalised before it is
//! used, so that `a//b/`, `/a/./b` and `/a/b` name the same file:
//!
//! - a leading `/` is added if missing, repeated `/` are collapsed, a trailing `/` is
//!   dropped and `.` components are removed;
//! - a `..` component is refused rather than resolved, so no spelling of a path escapes or
//!   aliases another;
//! - NUL is refused (paths reach C code in programs), as are empty paths and the root
//!   itself as a file name.
//!
//! Invariant: a canonical path starts with `/`, has no empty, `.` or `..` component, no
//! NUL, is at most [`PATH_SIZE_MAX`] bytes and each component is at most
//! [`NAME_SIZE_MAX`] bytes. The canonical directory `""` is the root.

/// Bytes of a path, canonical or as given. Equal to `csx_proto::limits::PATH_SIZE_MAX`:
/// paths travel in commands and are copied out of program memory by `csx_file_*`
/// functions, so they stay short; 1 KiB allows any sane hierarchy.
pub const PATH_SIZE_MAX: usize = 1024;

/// Bytes of one path component: POSIX `NAME_MAX`, so a FUSE view of the store can show
/// every name.
pub const NAME_SIZE_MAX: usize = 255;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path names no file (empty, or only `/` and `.`).
    #[error("path is empty")]
    Empty,
    /// The path is too long.
    #[error("path is {len} bytes, limit is {limit}")]
    TooLong { len: usize, limit: usize },
    /// One component is too long.
    #[error("path component is {len} bytes, limit is {limit}")]
    NameTooLong { len: usize, limit: usize },
    /// The path contains a NUL byte.
    #[error("path has a NUL byte at byte {position}")]
    Nul { position: usize },
    /// The path has a `..` component.
    #[error("path has a `..` component")]
    DotDot,
}

/// The canonical spelling of a file path.
pub fn normalize(path: &str) -> Result<String, PathError> {
    let canonical = normalize_dir(path)?;
    if canonical.is_empty() {
        return Err(PathError::Empty);
    }
    Ok(canonical)
}

/// The canonical spelling of a directory path: like [`normalize`], but the root (`""`,
/// `/`, `.`) is allowed and spelled `""`.
pub fn normalize_dir(path: &str) -> Result<String, PathError> {
    if path.len() > PATH_SIZE_MAX {
        return Err(PathError::TooLong {
            len: path.len(),
            limit: PATH_SIZE_MAX,
        });
    }
    if let Some(position) = path.bytes().position(|b| b == 0) {
        return Err(PathError::Nul { position });
    }
    let mut canonical = String::with_capacity(path.len() + 1);
    for component in path.split('/') {
        match component {
            "" | "." => continue,
            ".." => return Err(PathError::DotDot),
            name if name.len() > NAME_SIZE_MAX => {
                return Err(PathError::NameTooLong {
                    len: name.len(),
                    limit: NAME_SIZE_MAX,
                })
            }
            name => {
                canonical.push('/');
                canonical.push_str(name);
            }
        }
    }
    if canonical.len() > PATH_SIZE_MAX {
        return Err(PathError::TooLong {
            len: canonical.len(),
            limit: PATH_SIZE_MAX,
        });
    }
    Ok(canonical)
}

/// Whether `path` is already canonical (used to check keys read back from metadata).
pub fn is_canonical(path: &str) -> bool {
    normalize(path).is_ok_and(|canonical| canonical == path)
}

/// The proper ancestors of a canonical path, shortest first: `/a/b/c` gives `/a`, `/a/b`.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(|(i, _)| i)
        .filter(|&i| i > 0)
        .map(move |i| &path[..i])
}

/// Whether canonical `path` is `dir` (canonical directory) or lies below it.
pub fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// A short, printable rendering of a path that was refused, for error messages: a path
/// given by a program may be long or hold control bytes.
pub(crate) fn for_display(path: &str) -> String {
    const SHOWN_MAX: usize = 128;
    let mut shown: String = path.chars().take(SHOWN_MAX).collect();
    if shown.len() < path.len() {
        shown.push('…');
    }
    shown.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<&str, PathError>) {
        assert_eq!(
            normalize(input).as_deref(),
            expected.as_deref(),
            "{input:?}"
        );
    }

    #[test]
    fn canonical_spellings() {
        check("/a/b", Ok("/a/b"));
        check("a/b", Ok("/a/b"));
        check("//a///b//", Ok("/a/b"));
        check("/./a/./b/.", Ok("/a/b"));
        check("/a.b/..c/c..", Ok("/a.b/..c/c.."));
        check("/ü/日本", Ok("/ü/日本"));
    }

    #[test]
    fn refused_paths() {
        check("", Err(PathError::Empty));
        check("/", Err(PathError::Empty));
        check("/./", Err(PathError::Empty));
        check("/a/../b", Err(PathError::DotDot));
        check("..", Err(PathError::DotDot));
        check("/a\0b", Err(PathError::Nul { position: 2 }));
        let long_name = "x".repeat(NAME_SIZE_MAX + 1);
        check(
            &long_name,
            Err(PathError::NameTooLong {
                len: NAME_SIZE_MAX + 1,
                limit: NAME_SIZE_MAX,
            }),
        );
        let long_path = "/ab".repeat(PATH_SIZE_MAX / 3 + 1);
        check(
            &long_path,
            Err(PathError::TooLong {
                len: long_path.len(),
                limit: PATH_SIZE_MAX,
            }),
        );
        // The canonical form may be one byte longer than the input (leading slash).
        let edge = format!("b{}", "/ab".repeat((PATH_SIZE_MAX - 1) / 3));
        assert_eq!(edge.len(), PATH_SIZE_MAX);
        assert!(matches!(normalize(&edge), Err(PathError::TooLong { .. })));
    }

    #[test]
    fn directories_and_ancestry() {
        assert_eq!(normalize_dir("/").as_deref(), Ok(""));
        assert_eq!(normalize_dir("").as_deref(), Ok(""));
        assert_eq!(normalize_dir("d/").as_deref(), Ok("/d"));
        assert_eq!(ancestors("/a/b/c").collect::<Vec<_>>(), ["/a", "/a/b"]);
        assert_eq!(ancestors("/a").count(), 0);
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(is_within("/a", ""));
        assert!(!is_within("/ab", "/a"));
        assert!(is_canonical("/a/b"));
        assert!(!is_canonical("a/b"));
        assert!(!is_canonical("/a/"));
    }

    #[test]
    fn refused_paths_display_safely() {
        let shown = for_display(&format!("/a\n{}", "z".repeat(500)));
        assert!(shown.starts_with("/a\\n"));
        assert!(shown.chars().count() < 200);
    }
}
