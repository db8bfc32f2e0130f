//! The system calls the shm and tcp transports need that `std` does not wrap: memfd
//! with seals, eventfd, poll, passing file descriptors over a unix socket
//! (`SCM_RIGHTS`), and socket buffer sizes. One of the crate's two unsafe modules (the other is
//! `transport::shm::ring`); every block states its invariants.
//!
//! Invariant: every descriptor made or received here is owned by an [`OwnedFd`] at once,
//! so none leaks and none is closed twice.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The most descriptors one message carries (the shm handshake sends three).
pub const FDS_PER_MESSAGE_MAX: usize = 4;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Creates an anonymous memory file of `size_bytes` that can be sealed, and seals it
/// against shrinking and growing: a peer that maps it can never see it truncated
/// under its mapping (which would fault on access).
pub fn memfd_sealed(name: &str, size_bytes: u64) -> io::Result<File> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call; the flags
    // are valid for memfd_create. The returned descriptor is new and owned by nobody
    // else, so `OwnedFd::from_raw_fd` takes sole ownership of it.
    let fd = unsafe {
        let fd = cvt(libc::memfd_create(
            cname.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        ))?;
        OwnedFd::from_raw_fd(fd)
    };
    let file = File::from(fd);
    file.set_len(size_bytes)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS takes an int argument and only changes the file's seals; the
    // descriptor is open for the duration of the call.
    cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(file)
}

/// Whether `file` is sealed against shrinking (so mapping all of it is safe).
pub fn is_sealed_against_shrinking(file: &File) -> io::Result<bool> {
    // SAFETY: F_GET_SEALS takes no argument and only reads the seals of an open
    // descriptor.
    let seals = cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) })?;
    Ok(seals & libc::F_SEAL_SHRINK != 0)
}

/// An eventfd: a doorbell one side rings and the other sleeps on.
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// A new, non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd with valid flags returns a new descriptor or -1; the new one is
        // owned by nobody else.
        let fd = unsafe {
            let fd = cvt(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
            OwnedFd::from_raw_fd(fd)
        };
        Ok(EventFd(File::from(fd)))
    }

    /// Wraps a received eventfd.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(File::from(fd))
    }

    /// Rings: wakes the side sleeping on it (or makes its next wait return at once).
    pub fn notify(&self) -> io::Result<()> {
        match (&self.0).write(&1u64.to_ne_bytes()) {
            Ok(_) => Ok(()),
            // The counter is saturated: the sleeper has plenty of wake-ups pending.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Clears pending rings without waiting.
    pub fn clear(&self) {
        let mut buf = [0u8; 8];
        let _ = (&self.0).read(&mut buf);
    }

    /// The descriptor, for polling and passing.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits until one of `fds` is readable (or hung up), or `timeout` passes. Returns
/// which were ready, by index.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = match timeout {
        None => -1,
        // Round up so a short timeout still sleeps instead of spinning.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs that lives across
    // the call; every descriptor in it is borrowed, so open, for the call's duration.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    match cvt(r) {
        Ok(_) => Ok(pfds.iter().map(|p| p.revents != 0).collect()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![false; fds.len()]),
        Err(e) => Err(e),
    }
}

/// Asks for `bytes` of send and receive buffer on socket `fd`. The kernel caps the
/// request at `net.core.wmem_max` / `rmem_max` and doubles it for its bookkeeping.
pub fn set_socket_buffers(fd: &impl AsFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for option in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: the descriptor is borrowed, so open, for the call; `value` is a live
        // c_int and the length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_fd().as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        cvt(r)?;
    }
    Ok(())
}

/// A socket read that never waits: `recv` with `MSG_DONTWAIT`, whatever the socket's
/// blocking mode (an empty socket answers `WouldBlock`).
#[derive(Debug)]
pub struct DontWait<'a, F: AsFd>(pub &'a F);

impl<F: AsFd> Read for DontWait<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the call;
        // the descriptor is borrowed, so open, for its duration.
        let r = unsafe {
            libc::recv(
                self.0.as_fd().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// Waits up to `timeout` for `fd` to be readable (a listener to have a connection);
/// errors count as "look again".
pub fn wait_readable(fd: &impl AsFd, timeout: Duration) {
    let _ = poll_readable(&[fd.as_fd()], Some(timeout));
}

/// Sends `bytes` with `fds` attached (SCM_RIGHTS) in one message.
pub fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(
        !bytes.is_empty(),
        "descriptors travel with at least one byte"
    );
    assert!(fds.len() <= FDS_PER_MESSAGE_MAX);
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let fds_bytes = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fds_bytes as u32) } as usize;
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is a valid "empty" value; every pointer set below points
    // into `iov` and `control`, which outlive the sendmsg call. CMSG_FIRSTHDR of a
    // control buffer of CMSG_SPACE(n) bytes is non-null and has room for a header and
    // n bytes of data, which is exactly what is written. sendmsg only reads the buffers.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(
            raw.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            raw.len(),
        );
        libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    let sent = usize::try_from(sent).map_err(|_| io::Error::last_os_error())?;
    if sent != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short handshake send",
        ));
    }
    Ok(())
}

/// Receives one message of at most `buf.len()` bytes and the descriptors attached to it
/// (at most [`FDS_PER_MESSAGE_MAX`]; more, or a truncated control message, is an error
/// and whatever arrived is closed).
pub fn recv_with_fds(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fds_bytes = FDS_PER_MESSAGE_MAX * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fds_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: the msghdr points at `iov` (into `buf`) and `control`, both alive and
    // writable for the call. After recvmsg, the kernel has written `msg_controllen`
    // bytes of well-formed control messages into `control`; CMSG_FIRSTHDR/NXTHDR walk
    // only within that length, and for each SCM_RIGHTS message the data holds
    // `(cmsg_len - CMSG_LEN(0)) / size_of::<c_int>()` new descriptors, owned by this
    // process from now on: each is wrapped in an OwnedFd exactly once.
    let (n, truncated) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        (n as usize, msg.msg_flags & libc::MSG_CTRUNC != 0)
    };
    if truncated {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "handshake carried more descriptors than expected",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_rings_and_polls() {
        let e = EventFd::new().unwrap();
        let ready = poll_readable(&[e.fd()], Some(Duration::from_millis(1))).unwrap();
        assert_eq!(ready, vec![false]);
        e.notify().unwrap();
        let ready = poll_readable(&[e.fd()], Some(Duration::from_millis(1))).unwrap();
        assert_eq!(ready, vec![true]);
        e.clear();
        let ready = poll_readable(&[e.fd()], Some(Duration::ZERO)).unwrap();
        assert_eq!(ready, vec![false]);
    }

    #[test]
    fn descriptors_travel_over_a_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let mem = memfd_sealed("csx-test", 4096).unwrap();
        assert!(is_sealed_against_shrinking(&mem).unwrap());
        assert!(mem.set_len(0).is_err(), "sealed against shrinking");
        let ev = EventFd::new().unwrap();
        send_with_fds(&a, b"hello", &[mem.as_fd(), ev.fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 2);
        let got = File::from(fds.into_iter().next().unwrap());
        assert_eq!(got.metadata().unwrap().len(), 4096);
        assert!(is_sealed_against_shrinking(&got).unwrap());
    }
}
