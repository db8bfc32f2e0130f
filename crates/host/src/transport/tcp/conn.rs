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
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca)
            .map_err(|e| invalid(format!("{}: {e}", ca.display())))?
        {
            let cert = cert.map_err(|e| invalid(format!("{}: {e}", ca.display())))?;
            roots.add(cert).map_err(invalid)?;
        }
        if roots.is_empty() {
            return Err(invalid(format!("{} holds no certificate", ca.display())));
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }

    #[derive(Debug)]
    struct Shared {
        conn: Mutex<rustls::Connection>,
        /// Held from encrypting a write to sending it.
        write: Mutex<()>,
        sock: TcpStream,
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
        /// Completes the handshake on `sock` (within its read timeout) and wraps it.
        fn handshake(mut sock: TcpStream, mut conn: rustls::Connection) -> io::Result<TlsConn> {
            while conn.is_handshaking() {
                conn.complete_io(&mut sock)?;
            }
            Ok(TlsConn {
                shared: Arc::new(Shared {
                    conn: Mutex::new(conn),
                    write: Mutex::new(()),
                    sock,
                }),
                raw: Vec::new(),
                raw_at: 0,
            })
        }

        /// The client side: connects TLS to `server_name` over `sock`.
        pub fn connect(
            sock: TcpStream,
            config: Arc<rustls::ClientConfig>,
            server_name: &str,
        ) -> io::Result<TlsConn> {
            let name = ServerName::try_from(server_name.to_string())
                .map_err(|e| invalid(format!("server name {server_name:?}: {e}")))?;
            let conn = rustls::ClientConnection::new(config, name).map_err(invalid)?;
            TlsConn::handshake(sock, conn.into())
        }

        /// The server side: accepts TLS over `sock`.
        pub fn accept(sock: TcpStream, config: Arc<rustls::ServerConfig>) -> io::Result<TlsConn> {
            let conn = rustls::ServerConnection::new(config).map_err(invalid)?;
            TlsConn::handshake(sock, conn.into())
        }

        pub(super) fn tcp(&self) -> &TcpStream {
            &self.shared.sock
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
                (&self.shared.sock).write_all(&out)?;
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
