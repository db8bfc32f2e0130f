//! Mounting and unmounting: a FUSE session over a [`MetalFs`], in the foreground or on a
//! background thread, and the checks `csx mount` and `csx umount` need.
//!
//! Mounting needs `/dev/fuse` and either root (the mount system call, which `fuser` makes
//! itself without libfuse) or `fusermount3` from the `fuse3` package
//! (`scripts/setup.sh` installs it).

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};

use crate::core::MetalFs;
use crate::fuse::{FuseFs, OpsDir};

/// How long [`Mounted::unmount`] retries a busy mount.
pub const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Threads serving the kernel's requests: enough for several processes at once.
pub const THREADS: usize = 4;

/// The prefix of a csx mount's source (its `fsname`): `csx:` then the device's URI.
pub const FS_NAME_PREFIX: &str = "csx:";

/// Whether `b` goes into a mount's source as it is (everything else is `%XX`): no comma
/// (the option separator), no whitespace or backslash (escaped in `/proc/self/mountinfo`).
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"/:._-@+=~[]".contains(&b)
}

/// The mount source that names `metal`'s device: [`encode_fs_name`] of its URI (a state
/// directory as an absolute path). `csGetCSxFromPath` (csx-capi) reads it back from
/// `/proc/self/mountinfo`.
pub fn fs_name(metal: &MetalFs) -> String {
    let uri = match metal.device().uri() {
        csx_host::DeviceUri::Embedded(p) => {
            let abs = fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            abs.to_string_lossy().into_owned()
        }
        other => other.to_string(),
    };
    encode_fs_name(&uri)
}

/// `csx:` and `uri`, every byte that is not [`plain`] written `%XX` (upper-case hex).
pub fn encode_fs_name(uri: &str) -> String {
    let mut name = String::from(FS_NAME_PREFIX);
    for &b in uri.as_bytes() {
        if plain(b) {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name
}

/// The device URI a mount source made by [`encode_fs_name`] names; `None` for another
/// source.
pub fn device_of_fs_name(source: &str) -> Option<String> {
    let encoded = source.strip_prefix(FS_NAME_PREFIX)?.as_bytes();
    let mut out = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn config(fs_name: String) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(fs_name),
        MountOption::Subtype("csx".to_owned()),
        MountOption::DefaultPermissions,
    ];
    // Root may let every user in; others keep FUSE's owner-only default.
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        c.acl = SessionACL::All;
    }
    c.n_threads = Some(THREADS);
    c
}

fn with_path<'a>(mountpoint: &'a Path, what: &str) -> impl FnOnce(io::Error) -> io::Error + 'a {
    let what = what.to_owned();
    move |e| {
        io::Error::new(
            e.kind(),
            format!("cannot {what} {}: {e}", mountpoint.display()),
        )
    }
}

/// A mount served on a background thread; unmounted by [`Mounted::unmount`] or drop.
#[derive(Debug)]
pub struct Mounted {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
}

impl Mounted {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the session ended (the mount was unmounted from outside, `csx umount`).
    pub fn is_finished(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Waits for a session that [`Mounted::is_finished`].
    pub fn join(mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.join().map_err(with_path(&self.mountpoint, "serve")),
            None => Ok(()),
        }
    }

    /// Unmounts and waits for the session to end. A mount busy for a moment (a process
    /// of this program forked while a file of the mount was open holds it until it execs)
    /// is retried for up to [`BUSY_RETRY`] before `EBUSY` is returned.
    pub fn unmount(mut self) -> io::Result<()> {
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        let start = std::time::Instant::now();
        loop {
            match unmount(&self.mountpoint, false) {
                Err(e)
                    if e.kind() == io::ErrorKind::ResourceBusy && start.elapsed() < BUSY_RETRY =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && s.guard.is_finished() => break,
                other => {
                    other?;
                    break;
                }
            }
        }
        s.join().map_err(with_path(&self.mountpoint, "serve"))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Mounts `fs` at `mountpoint` and serves it on background threads.
pub fn spawn(fs: Arc<MetalFs>, mountpoint: &Path) -> io::Result<Mounted> {
    let name = fs_name(&fs);
    spawn_with(FuseFs::new(fs), name, mountpoint)
}

/// [`spawn`] with the `/.ops` directory of operator executables (see [`crate::shell`]).
pub fn spawn_with_ops(fs: Arc<MetalFs>, mountpoint: &Path, ops: OpsDir) -> io::Result<Mounted> {
    let name = fs_name(&fs);
    spawn_with(FuseFs::new(fs).with_ops(ops), name, mountpoint)
}

fn spawn_with(fuse: FuseFs, fs_name: String, mountpoint: &Path) -> io::Result<Mounted> {
    check_mountpoint(mountpoint)?;
    let session = Session::new(fuse, mountpoint, &config(fs_name))
        .and_then(Session::spawn)
        .map_err(with_path(mountpoint, "mount"))?;
    Ok(Mounted {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
    })
}

/// Mounts `fs` at `mountpoint`, calls `ready` once the mount is live, and serves it until
/// it is unmounted (`csx umount`, `umount`).
pub fn run(fs: Arc<MetalFs>, mountpoint: &Path, ready: impl FnOnce()) -> io::Result<()> {
    check_mountpoint(mountpoint)?;
    let name = fs_name(&fs);
    let session = Session::new(FuseFs::new(fs), mountpoint, &config(name))
        .map_err(with_path(mountpoint, "mount"))?;
    ready();
    session.run().map_err(with_path(mountpoint, "serve"))
}

/// Checks that `mountpoint` is an existing directory and not already a csx mount.
pub fn check_mountpoint(mountpoint: &Path) -> io::Result<()> {
    let meta = fs::metadata(mountpoint).map_err(with_path(mountpoint, "use mount point"))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mount point {} is not a directory", mountpoint.display()),
        ));
    }
    if is_mounted(mountpoint)? {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is already a csx mount", mountpoint.display()),
        ));
    }
    Ok(())
}

/// Whether a csx FUSE file system is mounted at `mountpoint` (from `/proc/self/mountinfo`).
pub fn is_mounted(mountpoint: &Path) -> io::Result<bool> {
    let target = fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let info = fs::read("/proc/self/mountinfo")?;
    Ok(info.split(|&b| b == b'\n').any(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        // Field 5 is the mount point (octal-escaped); after " - " come the type (`fuse`, or
        // `fuse.csx` through fusermount) and the source (`csx:URI`, [`fs_name`]; `csx`
        // from older builds).
        let Some(dash) = fields.iter().position(|f| *f == b"-") else {
            return false;
        };
        fields.len() > dash + 2
            && fields
                .get(4)
                .is_some_and(|m| unescape(m) == target.as_os_str().as_bytes())
            && (fields[dash + 1] == b"fuse.csx"
                || (fields[dash + 1] == b"fuse"
                    && (fields[dash + 2] == b"csx"
                        || fields[dash + 2].starts_with(FS_NAME_PREFIX.as_bytes()))))
    }))
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 4 <= field.len()
            && field[i + 1..i + 4].iter().all(u8::is_ascii_digit)
        {
            let code =
                (field[i + 1] - b'0') * 64 + (field[i + 2] - b'0') * 8 + (field[i + 3] - b'0');
            out.push(code);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

/// Unmounts the csx mount at `mountpoint`: the `umount2` system call as root, else
/// `fusermount3 -u`. A busy mount (open files, a shell inside) is refused with `EBUSY`
/// unless `lazy`, which detaches it now and lets the kernel finish when it is idle.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    if !is_mounted(mountpoint)? {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a csx mount", mountpoint.display()),
        ));
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let rc = unsafe { libc::umount2(c.as_ptr(), flags) };
        if rc != 0 {
            return Err(with_path(mountpoint, "unmount")(io::Error::last_os_error()));
        }
        return Ok(());
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let status = cmd.arg(mountpoint).status().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run fusermount3 (install fuse3: scripts/setup.sh): {e}"),
        )
    })?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "fusermount3 -u {} failed: {status}",
            mountpoint.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_source_names_its_device_and_reads_back() {
        for uri in [
            "tcp://127.0.0.1:4420",
            "shm://dev0",
            "/tmp/a dir,with\\odd\tchars/%41/ünï",
        ] {
            let name = encode_fs_name(uri);
            assert!(name.starts_with("csx:"), "{name}");
            assert!(
                !name
                    .bytes()
                    .any(|b| b == b',' || b == b'\\' || b.is_ascii_whitespace()),
                "{name}"
            );
            assert_eq!(device_of_fs_name(&name).as_deref(), Some(uri), "{name}");
        }
        assert_eq!(device_of_fs_name("csx"), None);
        assert_eq!(device_of_fs_name("csx:%4"), None);
        assert_eq!(device_of_fs_name("csx:%zz"), None);
        assert_eq!(device_of_fs_name("sshfs#x"), None);
    }
}
