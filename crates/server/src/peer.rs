//! The served device's peer links (`csx_device::peer`): a Memory Copy with a peer
//! source makes this daemon connect to the peer daemon itself (csx-host's tcp client,
//! one connection per peer, kept while it works) and read the range of the peer's NVM
//! namespace straight into the destination allocation: the bytes go daemon to daemon
//! and never through the client that asked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use csx_device::peer::{PeerError, PeerLink};
use csx_host::proto::limits::MEM_IO_SIZE_MAX;
use csx_host::proto::CopySource;
use csx_host::{CallError, Device};

/// Peer connections by URI.
#[derive(Default)]
pub(crate) struct TcpPeers {
    open: Mutex<HashMap<String, Arc<Device>>>,
}

impl TcpPeers {
    /// The connection to `peer`, and whether it was cached (it may have gone stale).
    fn connect(&self, peer: &str) -> Result<(Arc<Device>, bool), PeerError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = open.get(peer) {
            return Ok((Arc::clone(d), true));
        }
        if !peer.starts_with("tcp://") {
            return Err(PeerError::Refused {
                peer: peer.to_string(),
                reason: "a peer is a tcp://HOST:PORT device URI".to_string(),
            });
        }
        let d = Arc::new(Device::open(peer).map_err(|e| PeerError::Unreachable {
            peer: peer.to_string(),
            reason: e.to_string(),
        })?);
        open.insert(peer.to_string(), Arc::clone(&d));
        Ok((d, false))
    }

    /// Forgets a connection that failed, so the next read reconnects.
    fn forget(&self, peer: &str) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(peer);
    }
}

fn classify(peer: &str, e: &CallError) -> PeerError {
    let reason = e.to_string();
    let peer = peer.to_string();
    if e.status().is_some() {
        PeerError::Refused { peer, reason }
    } else {
        PeerError::Unreachable { peer, reason }
    }
}

impl PeerLink for TcpPeers {
    fn read_nvm(&self, peer: &str, offset: u64, dst: &mut [u8]) -> Result<(), PeerError> {
        let (dev, cached) = self.connect(peer)?;
        match read_from(&dev, peer, offset, dst) {
            // A cached connection to a peer that restarted since: once more, afresh.
            Err(PeerError::Unreachable { .. }) if cached => {
                self.forget(peer);
                let (dev, _) = self.connect(peer)?;
                read_from(&dev, peer, offset, dst).inspect_err(|e| {
                    if matches!(e, PeerError::Unreachable { .. }) {
                        self.forget(peer);
                    }
                })
            }
            Err(e) => {
                if matches!(e, PeerError::Unreachable { .. }) {
                    self.forget(peer);
                }
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }
}

/// Reads `dst.len()` bytes of the peer's NVM namespace at `offset` over `dev`.
fn read_from(dev: &Device, peer: &str, offset: u64, dst: &mut [u8]) -> Result<(), PeerError> {
    let result = (|| {
        let staging_len = (dst.len() as u64).clamp(1, MEM_IO_SIZE_MAX);
        let staging = dev.alloc(staging_len)?;
        let copied = (|| {
            let mut done = 0usize;
            for piece in dst.chunks_mut(staging_len as usize) {
                let n = piece.len() as u64;
                dev.copy_to_mem(
                    staging,
                    0,
                    vec![CopySource::Nvm {
                        offset: offset + done as u64,
                        len: n,
                    }],
                )?;
                dev.read_mem_into(staging, 0, piece)?;
                done += piece.len();
            }
            Ok(())
        })();
        let freed = dev.free(staging);
        copied.and(freed)
    })();
    result.map_err(|e: CallError| classify(peer, &e))
}
