//! `csx fs mount` and `csx fs umount`: the device's files as a file system (csx-fs, FUSE).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use csx_fs::{mount, MetalFs};

use crate::{connect, exit, GlobalArgs};

/// How often the foreground mount checks for a signal or an outside unmount.
const POLL: Duration = Duration::from_millis(50);

/// How long `csx fs mount` waits for its background mount to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Mount the device's files at MOUNTPOINT (FUSE).
///
/// Every ordinary file operation works on device files: create, read, write, append,
/// truncate, rename (files and directories), unlink, mkdir, rmdir, readdir, stat. `fsync`,
/// and `close` of a file that was written, make the writes durable on the device. Works on
/// an embedded device (a state directory: the mount process holds it) and on a served
/// one (`shm://NAME`, `tcp://HOST:PORT`).
///
/// Without --foreground the mount runs in a background process and `csx fs mount` returns
/// once it is live; `csx fs umount MOUNTPOINT` ends it. Needs /dev/fuse and root, or
/// fusermount3 (scripts/setup.sh installs fuse3).
///
/// Permissions: only the mounting user reaches the mount unless --allow-other; the
/// kernel checks every access against each file's mode and owner. chmod, chown (root
/// only), utimes and the mode of a create or mkdir (less the umask) are kept on the
/// device and survive remounts; a file with none recorded belongs to the mounting user,
/// mode 0644 (0755 for a directory).
///
/// Example: csx fs mount /mnt/csx --device /tmp/dev && ls /mnt/csx && csx fs umount /mnt/csx
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// An existing, empty directory.
    pub mountpoint: PathBuf,
    /// Serve in this process until unmounted or interrupted (SIGINT/SIGTERM unmount; a
    /// busy mount is detached and ends when its last open file closes).
    #[arg(long)]
    pub foreground: bool,
    /// With the background mount: append the mount process's messages to this file.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Let other local users in (FUSE allow_other; a user other than root needs
    /// user_allow_other in /etc/fuse.conf). File modes and owners still apply to them.
    #[arg(long)]
    pub allow_other: bool,
}

/// Unmount a `csx fs mount`.
///
/// Refuses (EBUSY) while files are open or a shell sits inside, unless --lazy: then the
/// mount is detached at once and ends when the last user leaves. The mount process stops
/// the operator pipes it runs, flushes the device and exits; `csx fs umount` (without
/// --lazy) returns once it has, so the mount point and the device are free again.
#[derive(Debug, clap::Args)]
pub struct UmountArgs {
    /// The directory `csx fs mount` mounted.
    pub mountpoint: PathBuf,
    /// Detach now even if busy.
    #[arg(long)]
    pub lazy: bool,
}

/// `csx fs {mount,umount}`.
#[derive(Debug, clap::Args)]
pub struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum FsCommand {
    Mount(MountArgs),
    Umount(UmountArgs),
}

pub fn run_group(args: FsArgs) -> anyhow::Result<u8> {
    match args.command {
        FsCommand::Mount(a) => {
            let g = a.dev.global();
            run_mount(a, &g)
        }
        FsCommand::Umount(a) => run_umount(a),
    }
}

pub fn run_mount(args: MountArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    mount::check_mountpoint(&args.mountpoint)?;
    if !args.foreground {
        return spawn_background(&args, global);
    }
    let dev = connect::open(global)?;
    let uri = dev.uri().to_string();
    let fs = Arc::new(MetalFs::new(dev));
    let stop = stop_on_signals()?;
    // The operators' executables (`MOUNT/.ops/NAME`) and the socket their proxies
    // register at, in a directory of this process's own.
    let mountpoint = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("cannot resolve {}", args.mountpoint.display()))?;
    let ops_dir = mount::private_ops_dir()?;
    let socket = ops_dir.join(mount::OPS_SOCKET);
    let ops_server = csx_fs::shell::OpsServer::start(Arc::clone(&fs), &socket, true)?;
    let exe = std::env::current_exe().context("cannot find the csx executable")?;
    let fuse = mount::fuse_fs(Arc::clone(&fs))?.with_ops(csx_fs::shell::ops_dir(
        &exe,
        &socket,
        &mountpoint,
    ));
    let opts = mount::MountOptions {
        allow_other: args.allow_other,
    };
    let mounted = mount::spawn_with(fuse, &mount::fs_name(&fs), &args.mountpoint, &opts)?;
    let record = record_server(&mounted);
    eprintln!(
        "csx: mounted {uri} at {} (pid {})",
        args.mountpoint.display(),
        std::process::id()
    );
    while !stop.load(Ordering::Acquire) && !mounted.is_finished() {
        std::thread::sleep(POLL);
    }
    // Running operator pipes are stopped first (their device runs aborted, programs
    // unloaded, proxies told): a proxy holding a file of the mount then lets go of it.
    drop(ops_server);
    if !mounted.is_finished() {
        // Interrupted: unmount this mount (never a later one at the same point); if files
        // are open, detach and end when the last closes.
        eprintln!("csx: unmounting {}", args.mountpoint.display());
        mounted.unmount_with(true)?;
    } else {
        mounted.join()?;
    }
    let _ = std::fs::remove_dir_all(&ops_dir);
    let fs =
        Arc::try_unwrap(fs).map_err(|_| anyhow::anyhow!("the mount still holds the device"))?;
    let closed = fs.close().context("the device did not close cleanly");
    if let Some(r) = &record {
        mount::forget_server(r);
    }
    closed?;
    eprintln!("csx: unmounted {}", args.mountpoint.display());
    Ok(exit::SUCCESS)
}

/// A flag SIGINT, SIGTERM and SIGHUP set.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    Ok(stop)
}

/// Records this process as the mount's server, so `csx fs umount` finds it by the mount's
/// device number and waits for it; the record's path, or `None` (said on stderr) when
/// it cannot.
fn record_server(mounted: &mount::Mounted) -> Option<PathBuf> {
    match mounted.dev().map(mount::record_server) {
        Some(Ok(path)) => Some(path),
        Some(Err(e)) => {
            eprintln!(
                "csx: cannot record the mount process ({e}): `csx fs umount` will not wait for it"
            );
            None
        }
        None => None,
    }
}

fn spawn_background(args: &MountArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let exe = std::env::current_exe().context("cannot find the csx executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["fs", "mount", "--foreground"])
        .arg(&args.mountpoint);
    if let Some(uri) = &global.device {
        cmd.arg("--device").arg(uri);
    }
    if args.allow_other {
        cmd.arg("--allow-other");
    }
    let stderr = match &args.log {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open the log {}", path.display()))?,
        ),
        None => Stdio::null(),
    };
    // Its own process group: a Ctrl-C in this terminal does not reach the mount.
    use std::os::unix::process::CommandExt as _;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("cannot start the mount process")?;
    let start = Instant::now();
    loop {
        if mount::is_mounted(&args.mountpoint)? {
            println!(
                "csx: mounted at {} (pid {}); unmount with: csx fs umount {}",
                args.mountpoint.display(),
                child.id(),
                args.mountpoint.display()
            );
            return Ok(exit::SUCCESS);
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the mount process exited ({status}) before mounting {}{}",
                args.mountpoint.display(),
                if args.log.is_some() {
                    "; see its log"
                } else {
                    "; run with --foreground to see why"
                }
            );
        }
        if start.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the mount of {} did not come up within {}s",
                args.mountpoint.display(),
                START_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(POLL);
    }
}

pub fn run_umount(args: UmountArgs) -> anyhow::Result<u8> {
    mount::unmount_and_wait(&args.mountpoint, args.lazy)?;
    Ok(exit::SUCCESS)
}
