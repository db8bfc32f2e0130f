//! The system calls the shm and tcp transports need that `std` does not wrap: memfd
//! with seals, eventfd, poll, passing file descriptors over a unix socket
//! (`SCM_RIGHTS`), non-blocking receives and socket buffer sizes, all through `rustix`'s
//! safe wrappers: this module has no unsafe code.
//!
//! Invariant: every descriptor made or received here is owned by an [`OwnedFd`] at once,
//! so none leaks and none is closed twice.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The most descriptors one message carries (the shm handshake sends three).
pub const FDS_PER_MESSAGE_MAX: usize = 4;

/// Creates an anonymous memory file of `size_bytes` that can be sealed, and seals it
/// against shrinking and growing: a peer that maps it can never see it truncated
/// under its mapping (which would fault on access).
pub fn memfd_sealed(name: &str, size_bytes: u64) -> io::Result<File> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let file = File::from(fd);
    file.set_len(size_bytes)?;
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(file)
}

/// Whether `file` is sealed against shrinking (so mapping all of it is safe).
pub fn is_sealed_against_shrinking(file: &File) -> io::Result<bool> {
    Ok(rustix::fs::fcntl_get_seals(file)?.contains(SealFlags::SHRINK))
}

/// An eventfd: a doorbell one side rings and the other sleeps on.
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// A new, non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
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
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    // Round up to whole milliseconds, as poll(2) counts them: a short timeout still
    // sleeps a tick instead of spinning.
    let timeout = timeout.map(|t| {
        let ms = t.as_micros().div_ceil(1000).min(i32::MAX as u128) as u64;
        Timespec::try_from(Duration::from_millis(ms)).expect("at most i32::MAX ms fits")
    });
    match rustix::event::poll(&mut pfds, timeout.as_ref()) {
        Ok(_) => Ok(pfds.iter().map(|p| !p.revents().is_empty()).collect()),
        Err(rustix::io::Errno::INTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(e.into()),
    }
}

/// Asks for `bytes` of send and receive buffer on socket `fd`. The kernel caps the
/// request at `net.core.wmem_max` / `rmem_max` and doubles it for its bookkeeping.
pub fn set_socket_buffers(fd: &impl AsFd, bytes: usize) -> io::Result<()> {
    // setsockopt takes an int.
    let bytes = bytes.min(i32::MAX as usize);
    rustix::net::sockopt::set_socket_send_buffer_size(fd, bytes)?;
    rustix::net::sockopt::set_socket_recv_buffer_size(fd, bytes)?;
    Ok(())
}

/// A socket read that never waits: `recv` with `MSG_DONTWAIT`, whatever the socket's
/// blocking mode (an empty socket answers `WouldBlock`).
#[derive(Debug)]
pub struct DontWait<'a, F: AsFd>(pub &'a F);

impl<F: AsFd> Read for DontWait<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, _) = rustix::net::recv(self.0, buf, RecvFlags::DONTWAIT)?;
        Ok(n)
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
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE_MAX))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let pushed = control.push(SendAncillaryMessage::ScmRights(fds));
    assert!(
        pushed,
        "the control buffer has room for FDS_PER_MESSAGE_MAX descriptors"
    );
    let sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
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
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE_MAX))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    // Every descriptor that arrived is owned (and closed on an error return) from here.
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    // The buffer may have room for a few more than the limit (it is rounded up for
    // alignment); the limit is the limit.
    if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() > FDS_PER_MESSAGE_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "handshake carried more descriptors than expected",
        ));
    }
    Ok((msg.bytes, fds))
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

    #[test]
    fn too_many_descriptors_are_refused_and_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let events: Vec<EventFd> = (0..FDS_PER_MESSAGE_MAX + 1)
            .map(|_| EventFd::new().unwrap())
            .collect();
        let fds: Vec<BorrowedFd<'_>> = events.iter().map(EventFd::fd).collect();
        // The sender's own limit: a fifth descriptor is a bug in the caller.
        let over = std::panic::catch_unwind(|| send_with_fds(&a, b"x", &fds));
        assert!(over.is_err());
        // A peer that sends more than the receiver has room for: the message is
        // refused, with what did arrive closed.
        let mut space =
            [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE_MAX + 1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(&a, &[IoSlice::new(b"x")], &mut control, SendFlags::empty()).unwrap();
        let mut buf = [0u8; 4];
        let err = recv_with_fds(&b, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn dont_wait_answers_would_block_on_an_empty_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 4];
        let err = DontWait(&b).read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        (&a).write_all(b"hi").unwrap();
        assert_eq!(DontWait(&b).read(&mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"hi");
    }
}
