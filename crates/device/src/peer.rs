//! Peer links: how a device reads another device's storage itself (a device-to-device
//! transfer, `CopySource::Peer` of a Memory Copy).
//!
//! The device runtime knows no transport, so whoever serves it (csx-server, which
//! connects to peers over tcp with csx-host) installs a [`PeerLink`] with
//! `DeviceRuntime::set_peer_link`. A device without one (an embedded device, whose
//! array moves bytes between members in process) answers a peer source with
//! `InvalidField`, naming the peer.

/// Why a peer read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The peer could not be reached, or went away during the read.
    #[error("peer {peer} is not reachable: {reason}")]
    Unreachable { peer: String, reason: String },
    /// The peer answered with an error (a range past its namespace, ...).
    #[error("peer {peer} refused the read: {reason}")]
    Refused { peer: String, reason: String },
}

/// Reads ranges of peer devices' NVM namespaces.
pub trait PeerLink: Send + Sync {
    /// Fills `dst` with the bytes of `peer`'s namespace from byte `offset`, exactly.
    fn read_nvm(&self, peer: &str, offset: u64, dst: &mut [u8]) -> Result<(), PeerError>;
}
