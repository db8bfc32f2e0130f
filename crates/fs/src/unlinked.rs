//! Files removed while the mount still has them open.
//!
//! POSIX keeps an open file alive after its last name is gone: whoever holds it open
//! reads, writes and `fstat`s the old contents until the last close, and only then is its
//! space freed (`tail -f` of a rotated log, an editor's open-then-unlink temporary). The
//! file store has no such notion, so the mount keeps it itself:
//!
//! - An unlink of a file this mount has open, or a rename over one, moves the file to
//!   [`UNLINKED_DIR`]`/OWNER/INO` instead of deleting it; the handles go on using it by
//!   inode. The directory is the mount's bookkeeping: no lookup, listing or `csx ls`
//!   shows it, nobody opens a name in it through the mount, and `df` counts its files
//!   as used until they are freed.
//! - The last release of such a file deletes it.
//! - A rename over an open file takes three steps on the device (the replaced file
//!   moves aside, the new one moves in, the aside copy becomes an unlinked file); a note
//!   next to the aside copy, `PENDING.to`, names where it came from, so a mount killed
//!   between the steps leaves a state the next mount puts back (the old file back under
//!   its name when nothing took its place: the rename did not happen).
//! - OWNER names the mount process that moved the file: its boot, pid and start time,
//!   and its host. A mount that starts deletes every leftover of an owner of this host
//!   that is no longer running (a killed mount's), so nothing outlives the next mount of
//!   the device; leftovers of another host's mount are left to that host.

use crate::attrs::Attrs;
use crate::core::{FsError, MetalFs};
use csx_proto::EntryKind;

/// Where the mount keeps files that were removed while open.
pub const UNLINKED_DIR: &str = "/.csx-unlinked";

/// Whether `path` is [`UNLINKED_DIR`] or below it.
pub fn is_unlinked(path: &str) -> bool {
    path.strip_prefix(UNLINKED_DIR)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The suffix of the note that names where a file moved aside by a rename came from.
const NOTE: &str = ".to";
/// The prefix of a file moved aside by a rename that has not finished.
const PENDING: &str = "r";

/// The mount process that owns the files it moved into [`UNLINKED_DIR`].
#[derive(Debug, Clone)]
pub struct Owner {
    token: String,
}

fn first_line(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s.lines().next()?.trim().to_owned())
}

/// This boot of this machine (the first 8 characters of its boot id).
fn boot() -> String {
    first_line("/proc/sys/kernel/random/boot_id")
        .map(|b| b.chars().filter(char::is_ascii_hexdigit).take(8).collect())
        .unwrap_or_default()
}

/// This machine's name, with nothing a path cannot hold.
fn host() -> String {
    first_line("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .replace('/', "_")
}

/// When process `pid` started, in clock ticks since boot ("/proc/PID/stat" field 22);
/// `None` when it is not running (gone, or a zombie nobody has reaped yet).
fn start_time(pid: u32) -> Option<u64> {
    crate::procstat::of(pid)
        .filter(|s| !s.ended())
        .map(|s| s.start_time)
}

/// Whether process `pid` runs (a zombie nobody has reaped yet does not).
pub fn is_running(pid: u32) -> bool {
    start_time(pid).is_some()
}

impl Owner {
    /// The owner that is this process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            token: format!(
                "{}.{pid}.{}.{}",
                boot(),
                start_time(pid).unwrap_or(0),
                host()
            ),
        }
    }

    /// The directory of this owner's files.
    pub fn dir(&self) -> String {
        format!("{UNLINKED_DIR}/{}", self.token)
    }

    /// The name an unlinked open file of inode `ino` has until its last close.
    pub fn hidden(&self, ino: u64) -> String {
        format!("{}/{ino}", self.dir())
    }

    /// The name the file of inode `ino` has while a rename over it is under way.
    pub fn pending(&self, ino: u64) -> String {
        format!("{}/{PENDING}{ino}", self.dir())
    }

    /// The note naming where [`Owner::pending`] came from.
    pub fn note(&self, ino: u64) -> String {
        format!("{}{NOTE}", self.pending(ino))
    }

    /// Whether the owner named `token` may still be running: one of this host and boot
    /// runs while its pid does with the same start time; one of this host and another
    /// boot does not; one of another host cannot be told, so it counts as running.
    fn running(token: &str) -> bool {
        let mut parts = token.splitn(4, '.');
        let (Some(b), Some(pid), Some(start), Some(h)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            // Not a name a mount makes: nobody owns it.
            return false;
        };
        if h != host() {
            return true;
        }
        if b != boot() {
            return false;
        }
        let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
            return false;
        };
        start_time(pid) == Some(start)
    }
}

/// Puts back or deletes what mounts that are no longer running left in
/// [`UNLINKED_DIR`]; the number of files it put back or deleted. Made durable before it
/// returns.
pub fn clean_leftovers(fs: &MetalFs, attrs: &Attrs, me: &Owner) -> Result<usize, FsError> {
    let owners = match fs.list(UNLINKED_DIR) {
        Ok(v) => v,
        Err(e) if e.errno == libc::ENOENT => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut changed = 0;
    for o in owners {
        if o.name == me.token || Owner::running(&o.name) {
            continue;
        }
        let dir = format!("{UNLINKED_DIR}/{}", o.name);
        if o.attr.kind == EntryKind::Dir {
            changed += put_back_renames(fs, attrs, &dir)?;
            for f in fs.list(&dir)? {
                let path = format!("{dir}/{}", f.name);
                if f.attr.kind == EntryKind::File {
                    fs.unlink(&path)?;
                    changed += 1;
                }
            }
            // A directory left with something in it (a directory someone made there) is
            // simply kept.
            let _ = fs.rmdir(&dir);
        } else {
            fs.unlink(&dir)?;
            changed += 1;
        }
        attrs.remove(fs, &dir)?;
    }
    let _ = fs.rmdir(UNLINKED_DIR);
    if changed > 0 {
        fs.sync()?;
    }
    Ok(changed)
}

/// Renames over open files that a killed mount left half done in `dir`: the replaced
/// file goes back under its name when nothing took its place.
fn put_back_renames(fs: &MetalFs, attrs: &Attrs, dir: &str) -> Result<usize, FsError> {
    let mut n = 0;
    for f in fs.list(dir)? {
        let Some(pending) = f.name.strip_suffix(NOTE) else {
            continue;
        };
        if !pending.starts_with(PENDING) {
            continue;
        }
        let note = format!("{dir}/{}", f.name);
        let aside = format!("{dir}/{pending}");
        let origin = fs.read(&note, 0, f.attr.size)?;
        let origin = String::from_utf8_lossy(&origin).into_owned();
        let free = matches!(fs.stat(&origin), Err(e) if e.errno == libc::ENOENT);
        if origin.starts_with('/') && !is_unlinked(&origin) && free && fs.stat(&aside).is_ok() {
            fs.rename(&aside, &origin)?;
            attrs.rename(fs, &aside, &origin)?;
            n += 1;
        }
        fs.unlink(&note)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_directory_and_below_are_unlinked_paths() {
        assert!(is_unlinked("/.csx-unlinked"));
        assert!(is_unlinked("/.csx-unlinked/a/1"));
        assert!(!is_unlinked("/.csx-unlinked2"));
        assert!(!is_unlinked("/a/.csx-unlinked"));
        assert!(!is_unlinked("/.csx"));
    }

    #[test]
    fn this_process_runs_and_a_dead_or_malformed_owner_does_not() {
        let me = Owner::current();
        assert!(Owner::running(&me.token), "{}", me.token);
        let dead = format!("{}.{}.1.{}", boot(), u32::MAX - 1, host());
        assert!(!Owner::running(&dead));
        let old_boot = format!("zzzzzzzz.{}.1.{}", std::process::id(), host());
        assert!(!Owner::running(&old_boot));
        assert!(Owner::running("00000000.1.1.some-other-host"));
        assert!(!Owner::running("junk"));
    }

    #[test]
    fn a_killed_owner_not_yet_reaped_is_not_running() {
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pid = child.id();
        let token = format!("{}.{pid}.{}.{}", boot(), start_time(pid).unwrap(), host());
        assert!(Owner::running(&token));
        child.kill().unwrap();
        // Not waited for: a zombie until reaped.
        let start = std::time::Instant::now();
        while is_running(pid) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "no zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!Owner::running(&token));
        child.wait().unwrap();
        assert!(!Owner::running(&token));
    }
}
