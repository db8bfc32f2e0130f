//! A tcp transport connection, plain or TLS: what both sides of the tcp transport read
//! PDUs from and write PDUs to.
//!
//! Each side uses a connection from two places at once (one reads, others write), so
//! [`Conn::try_clone`] gives another handle on the same connection. For TLS the handles
//! share one rustls state machine behind a lock: a reader takes the lock only to feed
//! it bytes it read from the socket and to take plaintext out, never across a blocking
//! read, so a writer is never held up by a reader waiting for data.
//!
//! Invariant: the bytes of one write reach the socket whole and in order with respect
//! to other writes (writers hold a write lock from encrypting to sending).

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use super::framing::{fill_polling, PduReader};

/// The longest one write system call blocks on a connection with a write stall limit
/// ([`Conn::set_write_stall`]): how exactly the stall is measured.
pub const WRITE_SLICE: Duration = Duration::from_millis(500);

/// One tcp connection (see the module doc).
#[derive(Debug)]
#[non_exhaustive]
pub enum Conn {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(tls::TlsConn),
}

impl Conn {
    /// The socket underneath (for its options and addresses).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            #[cfg(feature = "tls")]
            Conn::Tls(t) => t.tcp(),
        }
    }

    /// Another handle on the same connection.
    pub fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Plain(s) => Conn::Plain(s.try_clone()?),
            #[cfg(feature = "tls")]
            Conn::Tls(t) => Conn::Tls(t.try_clone()?),
        })
    }

    /// Whether the bytes travel encrypted.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Conn::Plain(_))
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(timeout)
    }

    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(nonblocking)
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp().shutdown(how)
    }

    /// Makes writes give up once the peer has taken no byte for `stall` (a peer that
    /// stopped reading), however many system calls the write takes: the socket's
    /// write timeout becomes a short slice ([`WRITE_SLICE`]), and a write that timed
    /// out is retried until `stall` has passed since its last progress. On a plain
    /// connection [`Conn::write_stalling`] does the retrying (a TLS connection retries
    /// inside, where a partial record may be resent).
    pub fn set_write_stall(&self, stall: Duration) -> io::Result<()> {
        self.tcp().set_write_timeout(Some(WRITE_SLICE.min(stall)))?;
        #[cfg(feature = "tls")]
        if let Conn::Tls(t) = self {
            t.set_write_stall(stall);
        }
        Ok(())
    }

    /// Writes all of `slices`, giving up with `TimedOut` once the peer has taken no
    /// byte for `stall` (see [`Conn::set_write_stall`], which must have been called).
    pub fn write_stalling(
        &mut self,
        slices: &mut [IoSlice<'_>],
        stall: Duration,
    ) -> io::Result<()> {
        let mut slices = slices;
        IoSlice::advance_slices(&mut slices, 0);
        let mut progress = std::time::Instant::now();
        while !slices.is_empty() {
            match self.write_vectored(slices) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    IoSlice::advance_slices(&mut slices, n);
                    progress = std::time::Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && !self.is_tls()
                        && progress.elapsed() < stall => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// [`fill_polling`] on a plain connection; `None` (block instead) on TLS, whose
    /// records cannot be polled for without the lock.
    pub fn fill_polling(&self, reader: &mut PduReader) -> Option<io::Result<usize>> {
        match self {
            Conn::Plain(s) => fill_polling(reader, s),
            #[cfg(feature = "tls")]
            Conn::Tls(_) => None,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(t) => t.write_all(buf).map(|()| buf.len()),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write_vectored(bufs),
            #[cfg(feature = "tls")]
            Conn::Tls(t) => t.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            #[cfg(feature = "tls")]
            Conn::Tls(_) => Ok(()),
        }
    }
}

#[cfg(feature = "tls")]
pub mod tls {
    //! TLS with rustls (ring provider): configurations from PEM files, the handshake,
    //! and [`TlsConn`].

    use std::io::{self, IoSlice, Read, Write};
    use std::net::TcpStream;
    use std::path::Path;
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::time::{Duration, Instant};

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    /// Bytes read from the socket at once: a whole TLS record and its overhead.
    const RAW_CHUNK: usize = 17 * 1024;

    fn invalid(e: impl std::fmt::Display) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e.to_string())
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A server's TLS configuration from a PEM certificate chain and a PEM private key.
    pub fn server_config(cert: &Path, key: &Path) -> io::Result<Arc<rustls::ServerConfig>> {
        let certs = CertificateDer::pem_file_iter(cert)
            .map_err(|e| invalid(format!("{}: {e}", cert.display())))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("{}: {e}", cert.display())))?;
        if certs.is_empty() {
            return Err(invalid(format!("{} holds no certificate", cert.display())));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| invalid(format!("{}: {e}", key.display())))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(invalid)?;
        Ok(Arc::new(config))
    }

    /// A client's TLS configuration trusting the certificates (CAs) in the PEM file `ca`.
    pub fn client_config(ca: &Path) -> io::Result<Arc<rustls::ClientConfig>> {
        // The errors do not name `ca`: the caller's error does (`OpenError::Io`).
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| invalid(e.to_string()))? {
            let cert = cert.map_err(|e| invalid(e.to_string()))?;
            roots.add(cert).map_err(invalid)?;
        }
        if roots.is_empty() {
            return Err(invalid("the file holds no certificate".to_string()));
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }

    /// The socket during a handshake: every read and write waits at most until the
    /// deadline, then fails with `TimedOut`.
    struct Deadlined<'a> {
        sock: &'a TcpStream,
        deadline: Instant,
    }

    impl Deadlined<'_> {
        fn left(&self) -> io::Result<Duration> {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the TLS handshake did not finish in time",
                ));
            }
            Ok(left)
        }

        fn timed_out(e: io::Error) -> io::Error {
            match e.kind() {
                // What a socket timeout reads as on Linux (EAGAIN).
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the TLS handshake did not finish in time",
                ),
                _ => e,
            }
        }
    }

    impl Read for Deadlined<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.sock.set_read_timeout(Some(self.left()?))?;
            self.sock.read(buf).map_err(Deadlined::timed_out)
        }
    }

    impl Write for Deadlined<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.sock.set_write_timeout(Some(self.left()?))?;
            self.sock.write(buf).map_err(Deadlined::timed_out)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A handshake failure as text a user can act on: rustls's own errors name a
    /// certificate problem by its Rust name (`Other(OtherError(CaUsedAsEndEntity))`).
    fn readable(e: io::Error) -> io::Error {
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
            return e;
        };
        io::Error::new(e.kind(), describe(tls))
    }

    /// Text for a TLS error (see [`readable`]).
    pub fn describe(e: &rustls::Error) -> String {
        use rustls::CertificateError as C;
        let cert = |what: &str| format!("the peer's certificate is refused: {what}");
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                C::UnknownIssuer => cert(
                    "it is not signed by a certificate this side trusts (CSX_TLS_CA names the CA to trust)",
                ),
                C::NotValidForName | C::NotValidForNameContext { .. } => cert(
                    "it does not name the host connected to (its subjectAltName must hold that IP address or DNS name)",
                ),
                C::Expired | C::ExpiredContext { .. } => cert("it has expired"),
                C::NotValidYet | C::NotValidYetContext { .. } => cert("it is not valid yet"),
                C::Revoked => cert("it is revoked"),
                C::BadSignature => cert("its signature does not verify"),
                C::BadEncoding => cert("it is not a well-formed X.509 certificate"),
                C::InvalidPurpose | C::InvalidPurposeContext { .. } => cert(
                    "it is not for TLS servers (its extendedKeyUsage lacks serverAuth)",
                ),
                C::Other(other) => {
                    let text = format!("{other:?}");
                    if text.contains("CaUsedAsEndEntity") {
                        cert(
                            "it is a CA certificate (basicConstraints CA:TRUE, openssl's default for `req -x509`) used as the server's own; \
                             give the server a certificate with basicConstraints=critical,CA:FALSE (see docs/security.md)",
                        )
                    } else {
                        cert(&text)
                    }
                }
                other => cert(&format!("{other:?}")),
            },
            rustls::Error::AlertReceived(alert) => {
                format!("the peer refused the TLS handshake (alert {alert:?}): it may not trust this side's certificate")
            }
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => format!(
                "the peer does not speak TLS here ({e}); is it a tcp:// address rather than tcps://?"
            ),
            other => other.to_string(),
        }
    }

    #[derive(Debug)]
    struct Shared {
        conn: Mutex<rustls::Connection>,
        /// Held from encrypting a write to sending it.
        write: Mutex<()>,
        sock: TcpStream,
        /// Milliseconds without progress after which a write gives up; 0: at the
        /// socket's first write timeout (see `Conn::set_write_stall`).
        stall_ms: std::sync::atomic::AtomicU64,
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One handle on a TLS connection (see the parent module doc).
    #[derive(Debug)]
    pub struct TlsConn {
        shared: Arc<Shared>,
        /// Bytes read from the socket and not yet given to rustls.
        raw: Vec<u8>,
        raw_at: usize,
    }

    impl TlsConn {
        /// Completes the handshake on `sock` by `deadline` and wraps it. The deadline
        /// bounds the whole handshake, not each read: a peer that trickles its bytes is
        /// cut when a silent one is. A failure reads as text: a timeout says the peer
        /// did not finish in time, a refused certificate says why ([`describe`]).
        fn handshake(
            sock: TcpStream,
            mut conn: rustls::Connection,
            deadline: Instant,
        ) -> io::Result<TlsConn> {
            let mut io = Deadlined {
                sock: &sock,
                deadline,
            };
            while conn.is_handshaking() {
                if let Err(e) = conn.complete_io(&mut io) {
                    return Err(readable(e));
                }
            }
            sock.set_read_timeout(None)?;
            sock.set_write_timeout(None)?;
            Ok(TlsConn {
                shared: Arc::new(Shared {
                    conn: Mutex::new(conn),
                    write: Mutex::new(()),
                    sock,
                    stall_ms: std::sync::atomic::AtomicU64::new(0),
                }),
                raw: Vec::new(),
                raw_at: 0,
            })
        }

        /// The client side: connects TLS to `server_name` over `sock`, the handshake
        /// done by `deadline`.
        pub fn connect(
            sock: TcpStream,
            config: Arc<rustls::ClientConfig>,
            server_name: &str,
            deadline: Instant,
        ) -> io::Result<TlsConn> {
            let name = ServerName::try_from(server_name.to_string())
                .map_err(|e| invalid(format!("server name {server_name:?}: {e}")))?;
            let conn = rustls::ClientConnection::new(config, name).map_err(invalid)?;
            TlsConn::handshake(sock, conn.into(), deadline)
        }

        /// The server side: accepts TLS over `sock`, the handshake done by `deadline`.
        pub fn accept(
            sock: TcpStream,
            config: Arc<rustls::ServerConfig>,
            deadline: Instant,
        ) -> io::Result<TlsConn> {
            let conn = rustls::ServerConnection::new(config).map_err(invalid)?;
            TlsConn::handshake(sock, conn.into(), deadline)
        }

        pub(super) fn tcp(&self) -> &TcpStream {
            &self.shared.sock
        }

        pub(super) fn set_write_stall(&self, stall: Duration) {
            let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX).max(1);
            self.shared
                .stall_ms
                .store(ms, std::sync::atomic::Ordering::Relaxed);
        }

        /// Sends `out` whole: a timed-out system call is retried until the stall limit
        /// has passed since the last byte the peer took (never resending a byte, so a
        /// record is never torn or doubled).
        fn send_raw(&self, out: &[u8]) -> io::Result<()> {
            let stall = Duration::from_millis(
                self.shared
                    .stall_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            );
            let mut at = 0;
            let mut progress = Instant::now();
            while at < out.len() {
                match (&self.shared.sock).write(&out[at..]) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => {
                        at += n;
                        progress = Instant::now();
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) && progress.elapsed() < stall => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }

        pub(super) fn try_clone(&self) -> io::Result<TlsConn> {
            Ok(TlsConn {
                shared: Arc::clone(&self.shared),
                raw: Vec::new(),
                raw_at: 0,
            })
        }

        /// Sends whatever rustls has to send. The caller holds the write lock.
        fn send_pending(&self) -> io::Result<()> {
            loop {
                let mut out = Vec::new();
                {
                    let mut c = lock(&self.shared.conn);
                    while c.wants_write() {
                        c.write_tls(&mut out)?;
                    }
                }
                if out.is_empty() {
                    return Ok(());
                }
                self.send_raw(&out)?;
            }
        }

        pub(super) fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
            let _w = lock(&self.shared.write);
            let mut rest = buf;
            while !rest.is_empty() {
                let n = lock(&self.shared.conn).writer().write(rest)?;
                self.send_pending()?;
                rest = &rest[n..];
            }
            Ok(())
        }

        pub(super) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let _w = lock(&self.shared.write);
            let mut total = 0;
            for b in bufs {
                let mut rest: &[u8] = b;
                while !rest.is_empty() {
                    let n = lock(&self.shared.conn).writer().write(rest)?;
                    self.send_pending()?;
                    rest = &rest[n..];
                    total += n;
                }
            }
            Ok(total)
        }

        pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            loop {
                // Plaintext already decrypted goes first.
                match lock(&self.shared.conn).reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.raw_at < self.raw.len() {
                    let wants_write = {
                        let mut c = lock(&self.shared.conn);
                        let mut rest = &self.raw[self.raw_at..];
                        let before = rest.len();
                        c.read_tls(&mut rest)?;
                        self.raw_at += before - rest.len();
                        c.process_new_packets().map_err(invalid)?;
                        c.wants_write()
                    };
                    if wants_write {
                        let _w = lock(&self.shared.write);
                        self.send_pending()?;
                    }
                    continue;
                }
                // Nothing buffered: read from the socket, without the lock.
                self.raw.resize(RAW_CHUNK, 0);
                self.raw_at = 0;
                let n = match (&self.shared.sock).read(&mut self.raw) {
                    Ok(n) => n,
                    Err(e) => {
                        self.raw.clear();
                        return Err(e);
                    }
                };
                self.raw.truncate(n);
                if n == 0 {
                    return Ok(0);
                }
            }
        }
    }
}
