//! Mounting and unmounting: a FUSE session over a [`MetalFs`], in the foreground or on a
//! background thread, and the checks `csx mount` and `csx umount` need.
//!
//! Mounting needs `/dev/fuse` and either root (the mount system call, which `fuser` makes
//! itself without libfuse) or `fusermount3` from the `fuse3` package
//! (`scripts/setup.sh` installs it).

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{BackgroundSession, Config, Session, SessionACL};

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

/// How a mount is made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Let every local user in (FUSE's `allow_other`; for a user other than root,
    /// `user_allow_other` in /etc/fuse.conf). Without it only the mounting user reaches
    /// the mount (the kernel refuses everyone else, root included). Either way the
    /// kernel checks each file's mode and owner (`default_permissions`).
    pub allow_other: bool,
}

/// Mounts a FUSE file system at `mountpoint` and returns the `/dev/fuse` descriptor
/// that serves it. The mount is made here, not by `fuser`, so that nothing unmounts it
/// by path later: `fuser` unmounts its mount point when its session ends, and a session
/// ended by an outside `umount` then removed whatever was mounted there next.
fn fuse_mount(mountpoint: &Path, fs_name: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    let mp = fs::canonicalize(mountpoint)?;
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        match mount_as_root(&mp, fs_name, opts) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            other => return other,
        }
    }
    mount_with_fusermount(&mp, fs_name, opts)
}

fn cstring(b: &[u8]) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// The mount system call (root): `/dev/fuse` opened here, its descriptor named in the
/// options.
fn mount_as_root(mp: &Path, fs_name: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let mode = fs::metadata(mp)?.mode();
    let dev = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/fuse: {e}")))?;
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd(),
        mode & libc::S_IFMT
    );
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    let source = cstring(fs_name.as_bytes())?;
    let target = cstring(mp.as_os_str().as_bytes())?;
    let fstype = cstring(b"fuse.csx")?;
    let data = cstring(data.as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(dev))
}

/// `fusermount3` (setuid root) mounts and passes the `/dev/fuse` descriptor back over a
/// socket (its `_FUSE_COMMFD` protocol).
fn mount_with_fusermount(mp: &Path, fs_name: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    use std::os::unix::process::CommandExt as _;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two fresh descriptors that nothing else owns.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut options = format!("fsname={fs_name},subtype=csx,default_permissions");
    if opts.allow_other {
        options.push_str(",allow_other");
    }
    let child_fd = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-o")
        .arg(&options)
        .arg("--")
        .arg(mp)
        .env("_FUSE_COMMFD", child_fd.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, on a descriptor
    // that stays open until the child has started.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(child_fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(child_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run fusermount3 (install fuse3: scripts/setup.sh): {e}"),
        )
    })?;
    drop(theirs);
    let fd = recv_fd(&ours);
    let out = child.wait_with_output()?;
    match fd? {
        Some(fd) => Ok(fd),
        None => Err(io::Error::other(format!(
            "fusermount3 could not mount {}: {}",
            mp.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// One descriptor received over `sock` (SCM_RIGHTS); `None` when the peer closed
/// without sending one.
fn recv_fd(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one control message carrying one descriptor, aligned for cmsghdr.
    let mut space = [0u64; 8];
    loop {
        // SAFETY: a zeroed msghdr is a valid empty one; the fields set below point at
        // `iov` and `space`, which outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&space) as _;
        // SAFETY: `msg` describes writable buffers of the sizes it states.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(None);
        }
        // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR and CMSG_DATA stay inside
        // `space`, and a SCM_RIGHTS message carries at least one int.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            if c.is_null()
                || (*c).cmsg_level != libc::SOL_SOCKET
                || (*c).cmsg_type != libc::SCM_RIGHTS
            {
                return Ok(None);
            }
            let fd = libc::CMSG_DATA(c).cast::<i32>().read_unaligned();
            return Ok(Some(OwnedFd::from_raw_fd(fd)));
        }
    }
}

/// A FUSE session over the descriptor of a mount made by [`fuse_mount`]; on failure
/// the mount is detached.
fn session(
    fuse: FuseFs,
    mountpoint: &Path,
    fs_name: &str,
    opts: &MountOptions,
) -> io::Result<Session<FuseFs>> {
    check_mountpoint(mountpoint)?;
    let fd = fuse_mount(mountpoint, fs_name, opts).map_err(with_path(mountpoint, "mount"))?;
    let acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let mut c = Config::default();
    c.acl = acl;
    c.n_threads = Some(THREADS);
    Session::from_fd(fuse, fd, acl, c).inspect_err(|_| {
        let _ = unmount(mountpoint, true);
    })
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
    /// The mount's device number (`MAJOR:MINOR` in mountinfo): which mount at the mount
    /// point is this one.
    dev: Option<String>,
}

impl Mounted {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The mount's device number as `/proc/self/mountinfo` writes it (`0:52`).
    pub fn dev(&self) -> Option<&str> {
        self.dev.as_deref()
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

    /// Whether the topmost mount at the mount point is still this one (when this mount's
    /// device number could not be read, whether there is a csx mount there at all).
    fn is_ours(&self) -> bool {
        match (&self.dev, mount_dev(&self.mountpoint)) {
            (Some(ours), Ok(Some(now))) => *ours == now,
            (None, Ok(Some(_))) => true,
            _ => false,
        }
    }

    /// Unmounts (this mount only: never one made later at the same mount point) and
    /// waits for the session to end. A mount busy for a moment (a process of this program
    /// forked while a file of the mount was open holds it until it execs) is retried for
    /// up to [`BUSY_RETRY`] before `EBUSY` is returned; with `lazy` a busy mount is
    /// detached instead and ends when its last file closes.
    pub fn unmount_with(mut self, lazy: bool) -> io::Result<()> {
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        let start = std::time::Instant::now();
        if !s.guard.is_finished() && !self.is_ours() && is_mounted(&self.mountpoint)? {
            // Another mount sits on top of this one: unmounting by path would remove it.
            self.session = Some(s);
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "another file system is mounted over this csx mount at {}: unmount it first",
                    self.mountpoint.display()
                ),
            ));
        }
        while !s.guard.is_finished() && self.is_ours() {
            match unmount(&self.mountpoint, false) {
                Err(e)
                    if e.kind() == io::ErrorKind::ResourceBusy && start.elapsed() < BUSY_RETRY =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) if e.kind() == io::ErrorKind::ResourceBusy && lazy => {
                    unmount(&self.mountpoint, true)?;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                other => {
                    other?;
                    break;
                }
            }
        }
        s.join().map_err(with_path(&self.mountpoint, "serve"))
    }

    /// [`Mounted::unmount_with`], refusing a mount that stays busy.
    pub fn unmount(self) -> io::Result<()> {
        self.unmount_with(false)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if !s.guard.is_finished() && self.is_ours() {
                let _ = unmount(&self.mountpoint, true);
            }
            // A detached mount ends when its last file closes; a drop does not wait
            // for that longer than a busy mount is retried.
            let start = std::time::Instant::now();
            while !s.guard.is_finished() && start.elapsed() < BUSY_RETRY {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if s.guard.is_finished() {
                let _ = s.join();
            }
        }
    }
}

/// The FUSE file system over `fs` ([`FuseFs::new`]), its failure an `io::Error`.
pub fn fuse_fs(fs: Arc<MetalFs>) -> io::Result<FuseFs> {
    FuseFs::new(fs)
        .map_err(|e| io::Error::other(format!("cannot read the mount's attributes: {e}")))
}

/// Mounts `fs` at `mountpoint` and serves it on background threads.
pub fn spawn(fs: Arc<MetalFs>, mountpoint: &Path) -> io::Result<Mounted> {
    let name = fs_name(&fs);
    spawn_with(fuse_fs(fs)?, &name, mountpoint, &MountOptions::default())
}

/// [`spawn`] with the `/.ops` directory of operator executables (see [`crate::shell`]).
pub fn spawn_with_ops(fs: Arc<MetalFs>, mountpoint: &Path, ops: OpsDir) -> io::Result<Mounted> {
    let name = fs_name(&fs);
    spawn_with(
        fuse_fs(fs)?.with_ops(ops),
        &name,
        mountpoint,
        &MountOptions::default(),
    )
}

/// Mounts `fuse` at `mountpoint` (source `fs_name`) and serves it on background threads.
pub fn spawn_with(
    fuse: FuseFs,
    fs_name: &str,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<Mounted> {
    let session = session(fuse, mountpoint, fs_name, opts)?;
    let dev = mount_dev(mountpoint).ok().flatten();
    let session = session
        .spawn()
        .map_err(with_path(mountpoint, "serve"))
        .inspect_err(|_| {
            let _ = unmount(mountpoint, true);
        })?;
    Ok(Mounted {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
        dev,
    })
}

/// Mounts `fs` at `mountpoint`, calls `ready` once the mount is live, and serves it until
/// it is unmounted (`csx umount`, `umount`).
pub fn run(fs: Arc<MetalFs>, mountpoint: &Path, ready: impl FnOnce()) -> io::Result<()> {
    let name = fs_name(&fs);
    let session = session(fuse_fs(fs)?, mountpoint, &name, &MountOptions::default())?;
    ready();
    session.run().map_err(with_path(mountpoint, "serve"))
}

/// The device number (`MAJOR:MINOR`, field 3 of `/proc/self/mountinfo`) of the topmost
/// csx mount at `mountpoint`, if there is one.
pub fn mount_dev(mountpoint: &Path) -> io::Result<Option<String>> {
    let target = fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let info = fs::read("/proc/self/mountinfo")?;
    // Later lines are mounted later: the last match is the one on top.
    Ok(info
        .split(|&b| b == b'\n')
        .filter(|line| is_csx_mount_at(line, target.as_os_str().as_bytes()))
        .filter_map(|line| line.split(|&b| b == b' ').nth(2))
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .next_back())
}

/// The name of a mount process's operator directory in the temporary directory:
/// this prefix, its pid, `-`, a number of its own.
const OPS_DIR_PREFIX: &str = "csx-mount-";

/// The operator socket's name in a mount's operator directory ([`private_ops_dir`]).
pub const OPS_SOCKET: &str = "ops.sock";

/// A fresh directory of this process's own in the temporary directory, for a mount's
/// operator socket, private to this user (0700): another user can neither reach a
/// socket in it nor put something in its place. The mount process removes it when it
/// ends; those a killed mount process left are removed here first ([`sweep_ops_dirs`]).
pub fn private_ops_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let tmp = std::env::temp_dir();
    sweep_ops_dirs(&tmp);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = tmp.join(format!("{OPS_DIR_PREFIX}{}-{nanos}", std::process::id()));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Removes the operator directories in `tmp` that a mount process of this user left
/// when it was killed: named for a pid no process has (in this pid namespace), owned by
/// this user, a directory (not a link), and with no server listening on its socket (so
/// a live mount seen from another pid namespace keeps its own). Returns how many went.
/// Best effort: a directory it cannot read or remove stays, and says nothing.
pub fn sweep_ops_dirs(tmp: &Path) -> usize {
    use std::os::unix::fs::MetadataExt as _;
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    let Ok(entries) = fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(OPS_DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u32>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        let path = entry.path();
        let mine = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if !mine || pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let served = std::os::unix::net::UnixStream::connect(path.join(OPS_SOCKET)).is_ok();
        if !served && fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directory where mount processes of this user record which mount they serve
/// (one file per mount, named by its device number, holding the pid), so that `csx
/// umount` can wait for the process to end. Private to the user (0700).
fn registry_dir() -> PathBuf {
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("csx-mounts-{uid}"))
}

/// The registry directory, made if missing; refused when another user owns it or
/// others may write to it (a squatter could then name any process).
fn registry(create: bool) -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let dir = registry_dir();
    if create {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    let meta = fs::symlink_metadata(&dir)?;
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of this user (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(dir)
}

fn record_name(dev: &str) -> String {
    dev.replace(':', "-")
}

/// Records that this process serves the mount with device number `dev`; returns the
/// record's path, to remove when the process ends ([`forget_server`]).
pub fn record_server(dev: &str) -> io::Result<PathBuf> {
    let dir = registry(true)?;
    let path = dir.join(record_name(dev));
    let tmp = dir.join(format!(".{}.{}", record_name(dev), std::process::id()));
    fs::write(&tmp, format!("{}\n", std::process::id()))?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Removes a record made by [`record_server`] if it still names this process.
pub fn forget_server(record: &Path) {
    let mine = fs::read_to_string(record)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if mine {
        let _ = fs::remove_file(record);
    }
}

/// The process serving the mount with device number `dev`, if this user's registry
/// names one that is alive and holds `/dev/fuse` open.
fn server_of(dev: &str) -> Option<u32> {
    let dir = registry(false).ok()?;
    let pid: u32 = fs::read_to_string(dir.join(record_name(dev)))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let holds_fuse = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .any(|f| fs::read_link(f.path()).is_ok_and(|l| l == Path::new("/dev/fuse")));
    holds_fuse.then_some(pid)
}

/// How long [`unmount_and_wait`] waits for the mount process to end.
pub const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// [`unmount`], then (unless `lazy`) waits until the process that served the mount has
/// ended, so that the mount point and the device are free when this returns. Returns
/// the pid waited for, if the mount's process was known.
pub fn unmount_and_wait(mountpoint: &Path, lazy: bool) -> io::Result<Option<u32>> {
    use std::os::fd::FromRawFd as _;
    let pidfd = mount_dev(mountpoint)?
        .and_then(|dev| server_of(&dev))
        .and_then(|pid| {
            // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            // SAFETY: a non-negative result is a fresh descriptor nothing else owns.
            (fd >= 0).then(|| (pid, unsafe { OwnedFd::from_raw_fd(fd as i32) }))
        });
    // A mount just made may be busy for a moment (the kernel, or a desktop's indexer,
    // still looking at it): retry as `Mounted::unmount` does before refusing.
    let start = std::time::Instant::now();
    loop {
        match unmount(mountpoint, lazy) {
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && start.elapsed() < BUSY_RETRY => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other?,
        }
    }
    let Some((pid, fd)) = pidfd else {
        return Ok(None);
    };
    if lazy {
        return Ok(Some(pid));
    }
    use std::os::fd::AsRawFd as _;
    let start = std::time::Instant::now();
    loop {
        let left = EXIT_WAIT.saturating_sub(start.elapsed());
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n > 0 {
            return Ok(Some(pid));
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if start.elapsed() >= EXIT_WAIT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} is unmounted, but its mount process {pid} is still running after {} s",
                    mountpoint.display(),
                    EXIT_WAIT.as_secs()
                ),
            ));
        }
    }
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
    let mut entries =
        fs::read_dir(mountpoint).map_err(with_path(mountpoint, "list mount point"))?;
    if entries.next().is_some() {
        // A mount would hide what is there (and a mount inside another csx mount would
        // shadow part of that device's tree).
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "mount point {} is not empty: csx mounts only on an empty directory",
                mountpoint.display()
            ),
        ));
    }
    Ok(())
}

/// Whether a csx FUSE file system is mounted at `mountpoint` (from `/proc/self/mountinfo`).
pub fn is_mounted(mountpoint: &Path) -> io::Result<bool> {
    Ok(mount_dev(mountpoint)?.is_some())
}

/// Whether the mountinfo `line` is a csx mount at `target`.
fn is_csx_mount_at(line: &[u8], target: &[u8]) -> bool {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    // Field 5 is the mount point (octal-escaped); after " - " come the type (`fuse`, or
    // `fuse.csx`) and the source (`csx:URI`, [`fs_name`]; `csx` from older builds).
    let Some(dash) = fields.iter().position(|f| *f == b"-") else {
        return false;
    };
    fields.len() > dash + 2
        && fields.get(4).is_some_and(|m| unescape(m) == target)
        && (fields[dash + 1] == b"fuse.csx"
            || (fields[dash + 1] == b"fuse"
                && (fields[dash + 2] == b"csx"
                    || fields[dash + 2].starts_with(FS_NAME_PREFIX.as_bytes()))))
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

    #[test]
    fn only_the_operator_directories_of_dead_mount_processes_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        // A pid that ran and is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let dir = |name: &str| {
            let p = tmp.path().join(name);
            fs::create_dir(&p).unwrap();
            fs::write(p.join(OPS_SOCKET), b"").unwrap();
            p
        };
        let stale = dir(&format!("{OPS_DIR_PREFIX}{dead}-17"));
        let live = dir(&format!("{OPS_DIR_PREFIX}{me}-18"));
        let foreign = dir(&format!("{OPS_DIR_PREFIX}{dead}x-19"));
        let other = dir("csx-mounts-0");
        // Named for the dead pid, but a server listens on its socket (a mount seen from
        // another pid namespace): kept.
        let listened = tmp.path().join(format!("{OPS_DIR_PREFIX}{dead}-20"));
        fs::create_dir(&listened).unwrap();
        let _server = std::os::unix::net::UnixListener::bind(listened.join(OPS_SOCKET)).unwrap();
        // A link with a dead pid's name is not followed nor removed.
        let link = tmp.path().join(format!("{OPS_DIR_PREFIX}{dead}-21"));
        std::os::unix::fs::symlink(&other, &link).unwrap();

        assert_eq!(sweep_ops_dirs(tmp.path()), 1);
        assert!(!stale.exists());
        for kept in [&live, &foreign, &other, &listened] {
            assert!(kept.join(OPS_SOCKET).exists(), "{}", kept.display());
        }
        assert!(fs::symlink_metadata(&link).is_ok());
        assert_eq!(sweep_ops_dirs(tmp.path()), 0);
    }

    #[test]
    fn a_mount_point_must_be_an_empty_directory() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("m");
        let e = check_mountpoint(&m).unwrap_err().to_string();
        assert!(e.contains(&m.display().to_string()), "{e}");
        fs::write(&m, b"x").unwrap();
        let e = check_mountpoint(&m).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        fs::remove_file(&m).unwrap();
        fs::create_dir(&m).unwrap();
        check_mountpoint(&m).unwrap();
        fs::write(m.join("f"), b"x").unwrap();
        let e = check_mountpoint(&m).unwrap_err().to_string();
        assert!(
            e.contains("not empty") && e.contains(&m.display().to_string()),
            "{e}"
        );
    }
}
