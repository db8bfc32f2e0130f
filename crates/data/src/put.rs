//! `csx put -r`: a local directory tree onto the device, file by file, directories
//! made explicitly, in a sorted (deterministic) order.

use std::path::{Path, PathBuf};

use csx_host::{Device, Progress};

use crate::error::DataError;

/// What a recursive put moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutSummary {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
}

/// Joins a device directory and a relative local path with `/`.
fn device_path(dev_dir: &str, rel: &Path) -> String {
    let mut p = dev_dir.trim_end_matches('/').to_string();
    for part in rel.components() {
        p.push('/');
        p.push_str(&part.as_os_str().to_string_lossy());
    }
    if p.is_empty() {
        p.push('/');
    }
    p
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<(PathBuf, bool)>) -> Result<(), DataError> {
    let dir = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| DataError::io(&dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| DataError::io(&dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let r = rel.join(e.file_name());
        let ty = e.file_type().map_err(|err| DataError::io(e.path(), err))?;
        if ty.is_dir() {
            out.push((r.clone(), true));
            walk(root, &r, out)?;
        } else if ty.is_file() {
            out.push((r, false));
        }
        // Symbolic links and special files are skipped: a put copies data, not links.
    }
    Ok(())
}

/// Makes a device directory; one that exists already is fine.
fn mkdir_p(dev: &Device, path: &str) -> Result<(), DataError> {
    match dev.mkdir(path) {
        Ok(()) | Err(csx_host::CallError::FileExists(_)) => Ok(()),
        Err(e) => Err(DataError::device(format!("mkdir {path}"), e)),
    }
}

/// Copies every regular file under `local` to `dev_dir` on the device, keeping the
/// tree's shape, each file replaced whole by rename, and flushes the device once at the
/// end: on `Ok` every file is durable. `progress` hears `(device path, progress of that
/// file)`.
pub fn put_dir(
    dev: &Device,
    local: &Path,
    dev_dir: &str,
    progress: &mut dyn FnMut(&str, Progress),
) -> Result<PutSummary, DataError> {
    if !dev_dir.starts_with('/') {
        return Err(DataError::Invalid(format!(
            "device directory {dev_dir:?} must be absolute (start with /)"
        )));
    }
    let meta = std::fs::metadata(local).map_err(|e| DataError::io(local, e))?;
    if !meta.is_dir() {
        return Err(DataError::Invalid(format!(
            "{} is not a directory (put -r copies directories; use csx put for a file)",
            local.display()
        )));
    }
    let mut entries = Vec::new();
    walk(local, Path::new(""), &mut entries)?;
    let mut summary = PutSummary::default();
    if dev_dir != "/" {
        mkdir_p(dev, dev_dir.trim_end_matches('/'))?;
    }
    for (rel, is_dir) in entries {
        let path = device_path(dev_dir, &rel);
        if is_dir {
            mkdir_p(dev, &path)?;
            summary.dirs += 1;
        } else {
            let src = local.join(&rel);
            let bytes = dev
                .put_file_unflushed(&src, &path, &mut |p| progress(&path, p))
                .map_err(|e| {
                    DataError::Invalid(format!("putting {} to {path}: {e}", src.display()))
                })?;
            summary.files += 1;
            summary.bytes += bytes;
        }
    }
    dev.flush()
        .map_err(|e| DataError::device(format!("flush after putting {dev_dir}"), e))?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_paths_join_with_slashes() {
        assert_eq!(
            device_path("/ssb/", Path::new("lineorder/a.col")),
            "/ssb/lineorder/a.col"
        );
        assert_eq!(device_path("/", Path::new("x")), "/x");
    }
}
