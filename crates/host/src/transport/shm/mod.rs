//! The shared-memory transport (`shm://NAME`): the emulated PCIe path to a
//! `csx device serve` on the same machine.
//!
//! Per client, the device creates one sealed memory file holding a control page, an
//! NVMe-style submission ring and completion ring of fixed-size entries, and the
//! client's *host memory*: a heap the host library allocates I/O buffers and response
//! areas from. The file and two eventfds (the submission doorbell and the completion
//! interrupt) reach the host over a unix socket (`CSX_SHM_DIR/csx-NAME.sock`, default
//! `/dev/shm`); that socket then stays open as each side's proof that the other lives.
//!
//! A command travels as its wire encoding in a submission entry (or, when larger than
//! an entry, in host memory the entry points at); its bulk data never travels inside
//! it: a Memory Write's source and a read's destination are buffers in host memory, and
//! the device copies straight between those and its own memory (one copy, as DMA). Both
//! sides poll their ring for a short while before they sleep on the eventfd, and ring
//! the other's only when it sleeps. Byte tables: `docs/design/shm.md`.
//!
//! | file          | owns                                                          |
//! |---------------|---------------------------------------------------------------|
//! | `framing.rs`  | the handshake messages, the control page, entry layouts        |
//! | `ring.rs`     | the shared mapping: index words, entry and buffer copies (unsafe) |
//! | `heap.rs`     | the host's allocator over its host memory                      |
//! | `client.rs`   | [`ShmTransport`], the host side, and [`HostBuffer`]            |
//! | `metrics.rs`  | counters of doorbells, interrupts and sleeps                   |
//!
//! The device side, one client of `csx device serve`, is `csx_server::shm`.
//!
//! Trust: the device trusts nothing in shared memory. It copies each entry out before
//! reading it, checks every index, offset and length against the region and the limits
//! below, and never forms a reference into memory the host can write, with one exception:
//! a device-memory allocation a host of the device's own user maps (`Transport::share_mem`,
//! the map request of `docs/design/shm.md`), which such a host could write through
//! `/proc` anyway. The host trusts its device, as a host trusts a PCIe device it lets DMA
//! into its memory.

mod client;
pub mod framing;
mod heap;
pub mod metrics;
pub mod ring;

use std::path::PathBuf;
use std::time::Duration;

use csx_proto::limits::{
    MESSAGE_SIZE_MAX, NAME_SIZE_MAX, QUEUE_DEPTH_MAX, TRACE_MESSAGES_MAX, TRACE_MESSAGE_SIZE_MAX,
};

// The shm transport's limits, with their reasons, live with every other bound.
pub use csx_proto::limits::{
    SHM_HOST_MEMORY_MAX as HOST_MEMORY_MAX, SHM_HOST_MEMORY_MIN as HOST_MEMORY_MIN,
    SHM_NAME_SIZE_MAX, SHM_RESPONSE_RETRIES_MAX as RESPONSE_RETRIES_MAX, TRANSFER_SIZE_MAX,
    TRANSPORT_MESSAGE_SIZE_MAX as HANDSHAKE_MESSAGE_SIZE_MAX,
};
use csx_proto::wire::COMPLETION_HEADER_SIZE;

pub use client::{HostBuffer, ShmOptions, ShmTransport};

/// Version of the handshake, the control page and the entry layouts.
pub const SHM_FORMAT_VERSION: u16 = 1;

/// Bytes of the control page at the start of the region.
pub const CONTROL_SIZE: usize = 4096;

/// Bytes of a submission entry: a 48-byte header and room for the encoding of every
/// common command (an Execute with a few inline ranges, a memory read or write).
pub const SQE_SIZE: usize = 256;

/// Bytes of a completion entry: a 24-byte header and room for the encoding of every
/// successful completion without a listing or a trace.
pub const CQE_SIZE: usize = 128;

/// Bytes of an encoded command an entry holds inline; longer ones go to host memory.
pub const SQE_INLINE_FRAME_MAX: usize = SQE_SIZE - 48;

/// Bytes of an encoded completion an entry holds inline; longer ones go to the
/// command's response area.
pub const CQE_INLINE_FRAME_MAX: usize = CQE_SIZE - 24;

/// Commands a client asks to have in flight unless told otherwise.
pub const QUEUE_DEPTH_DEFAULT: u32 = 256;

/// Bytes of host memory a client asks for unless told otherwise: room for the host
/// library's pipelined transfers (4 × 16 MiB) with their response areas. Pages are
/// only backed once touched.
pub const HOST_MEMORY_DEFAULT: u64 = 128 << 20;

/// Alignment (and granularity) of host memory allocations: a cache line, so the
/// device's copies into neighbouring buffers never share one.
pub const HEAP_ALIGNMENT: u64 = 64;

/// Bytes of the response area each command gets: more than any completion but a
/// listing can need (a trap, an error detail and a full trace).
pub const RESPONSE_AREA_SIZE: usize = 32 << 10;

/// Bytes of the first response area of a listing; a listing that needs more is asked
/// again with an area of the size the device reported.
pub const LISTING_RESPONSE_AREA_SIZE: usize = 256 << 10;

/// How long either side waits for the other's handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a host's close waits for the device to confirm the queue pair is gone.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the device waits for a host to make room in a full completion ring before
/// it treats the host as gone.
pub const COMPLETION_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the host polls its completion ring before it sleeps on the interrupt. It
/// yields the CPU between looks: on a machine with few cores the device's threads need
/// it, and a wake-up from sleep costs tens of µs there.
pub const HOST_SPIN: Duration = Duration::from_micros(50);

/// How long the host polls its completion ring without yielding before it yields
/// between looks: a yield is a system call (about a microsecond in a VM), longer than
/// a short command's round trip.
pub const HOST_SPIN_BUSY: Duration = Duration::from_micros(5);

const _: () = assert!(HOST_SPIN_BUSY.as_nanos() < HOST_SPIN.as_nanos());

/// How long the device polls a client's rings after its last work before it waits
/// (yielding the CPU between looks, as the host does).
pub const DEVICE_SPIN: Duration = Duration::from_micros(50);

/// Environment variable naming the directory of the handshake sockets.
pub const SHM_DIR_ENV: &str = "CSX_SHM_DIR";

/// The largest completion other than a listing: header, a trap with a full message, an
/// error detail with a full name and message, and an Execute reply with a full trace.
const NON_LISTING_COMPLETION_MAX: usize = COMPLETION_HEADER_SIZE
    + (4 + 1 + 4 + 8 + 4 + MESSAGE_SIZE_MAX)
    + (8 + 4 + NAME_SIZE_MAX + 4 + MESSAGE_SIZE_MAX)
    + (8 + 4 + TRACE_MESSAGES_MAX * (4 + TRACE_MESSAGE_SIZE_MAX));

const _: () = assert!(NON_LISTING_COMPLETION_MAX < RESPONSE_AREA_SIZE);
const _: () = assert!(LISTING_RESPONSE_AREA_SIZE >= RESPONSE_AREA_SIZE);
const _: () = assert!(CQE_INLINE_FRAME_MAX >= COMPLETION_HEADER_SIZE + 12);
const _: () = assert!(QUEUE_DEPTH_MAX.is_power_of_two());
const _: () = assert!(RESPONSE_AREA_SIZE as u64 * 16 <= HOST_MEMORY_MIN);
const _: () = assert!(CONTROL_SIZE.is_multiple_of(4096));

/// Checks a queue name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot (it
/// becomes part of a file name).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > SHM_NAME_SIZE_MAX {
        return Err(format!(
            "name has {} bytes, must be 1..={SHM_NAME_SIZE_MAX}",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Err("name must not start with a dot".to_string());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("name may hold only letters, digits, '.', '_' and '-'".to_string());
    }
    Ok(())
}

/// The directory of this user's handshake sockets: `$CSX_SHM_DIR`, else
/// `/dev/shm/csx-UID` (the temporary directory when there is no `/dev/shm`), UID this
/// process's effective user id. A per-user directory, so another user cannot bind a
/// name first (`/dev/shm` itself is writable by everyone).
pub fn socket_dir() -> PathBuf {
    match std::env::var_os(SHM_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let base = if std::path::Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            };
            base.join(format!("csx-{}", my_uid()))
        }
    }
}

/// The handshake socket of queue name `name`: `socket_dir()/NAME.sock`.
pub fn socket_path(name: &str) -> PathBuf {
    socket_dir().join(format!("{name}.sock"))
}

/// This process's effective user id.
pub fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether a peer (a device, or a client) of user `uid` is trusted by a process of
/// user `me`: the same user, or root (which can read either process's memory anyway).
pub fn trusted_uid(uid: u32, me: u32) -> bool {
    uid == me || uid == 0
}

/// Checks the socket directory `dir` is safe to use: a real directory (not a symbolic
/// link), owned by this user or root, writable by nobody else. `Err` says what is
/// wrong and what to do.
pub fn check_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = my_uid();
    if !meta.file_type().is_dir() {
        return Err(format!(
            "the socket directory {} is not a directory (a symbolic link or a file); remove it or set {SHM_DIR_ENV}",
            dir.display()
        ));
    }
    if !trusted_uid(meta.uid(), me) {
        return Err(format!(
            "the socket directory {} belongs to user {}, not to you (user {me}) or root: someone else made it; remove it or set {SHM_DIR_ENV}",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "the socket directory {} is writable by other users (mode {:o}); make it 0700 or set {SHM_DIR_ENV}",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Makes the socket directory if it is missing (mode 0700, or 0711 when other users
/// are served, so they can reach a socket in it) and checks it ([`check_dir`]).
pub fn prepare_dir(for_other_users: bool) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = socket_dir();
    let mode = if for_other_users { 0o711 } else { 0o700 };
    match std::fs::DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => {
            // The umask may have taken bits away; set exactly these.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
    }
    check_dir(&dir)?;
    if for_other_users {
        // A directory made earlier for this user alone: other users must be able to
        // reach a socket in it (search only; nothing in it becomes listable).
        use std::os::unix::fs::MetadataExt;
        let now = std::fs::metadata(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .mode()
            & 0o7777;
        if now & 0o011 != 0o011 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(now | 0o011))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }
    Ok(dir)
}

/// The user at the other end of a unix socket (`SO_PEERCRED`).
pub fn peer_uid(stream: &std::os::unix::net::UnixStream) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("dev0").is_ok());
        assert!(check_name("a.b_c-9").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(socket_path("dev0").ends_with("dev0.sock"));
        assert!(trusted_uid(my_uid(), my_uid()));
        assert!(trusted_uid(0, 1000));
        assert!(!trusted_uid(65534, 1000));
    }
}
