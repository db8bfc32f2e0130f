//! [`InprocTransport`]: a queue pair on an embedded device.

use std::sync::Arc;
use std::time::Duration;

use csx_device::{QueuePair, SubmitError};
use csx_proto::{
    decode_command, decode_completion, encode_command, encode_completion, Command, Completion,
};

use super::embedded::Embedded;
use super::InprocOptions;
use crate::error::TransportError;
use crate::transport::Transport;

/// A queue pair on an embedded device (see the module doc of `inproc`).
#[derive(Debug)]
pub struct InprocTransport {
    /// Dropped before `device`, so the pair's allocations are reclaimed while the device
    /// still runs.
    qp: Option<QueuePair>,
    device: Option<Arc<Embedded>>,
    wire_check: bool,
}

impl InprocTransport {
    /// A new queue pair on `device`.
    pub fn new(
        device: Arc<Embedded>,
        options: InprocOptions,
    ) -> Result<InprocTransport, csx_device::DeviceError> {
        let qp = device.device().queue_pair(options.queue_depth)?;
        Ok(InprocTransport {
            qp: Some(qp),
            device: Some(device),
            wire_check: options.wire_check,
        })
    }

    /// The embedded device this pair talks to.
    pub fn embedded(&self) -> &Arc<Embedded> {
        self.device.as_ref().expect("present until closed")
    }

    fn qp(&self) -> &QueuePair {
        self.qp.as_ref().expect("present until closed")
    }

    /// Through the wire encoding and back, when checking it.
    fn completion_out(&self, c: Completion) -> Result<Completion, TransportError> {
        if !self.wire_check {
            return Ok(c);
        }
        Ok(decode_completion(&encode_completion(&c)?)?)
    }
}

impl Transport for InprocTransport {
    fn name(&self) -> &'static str {
        "inproc"
    }

    fn queue_depth(&self) -> u32 {
        self.qp().depth()
    }

    fn submit(&self, cmd: Command) -> Result<(), TransportError> {
        let cmd = if self.wire_check {
            decode_command(&encode_command(&cmd)?)?
        } else {
            cmd
        };
        self.qp().submit(cmd).map_err(|e| match e {
            SubmitError::QueueFull { depth } => TransportError::QueueFull { depth },
            _ => TransportError::Closed,
        })
    }

    fn try_reap(&self) -> Result<Option<Completion>, TransportError> {
        self.qp()
            .try_reap()
            .map(|c| self.completion_out(c))
            .transpose()
    }

    fn reap(&self, timeout: Option<Duration>) -> Result<Option<Completion>, TransportError> {
        self.qp()
            .reap(timeout)
            .map(|c| self.completion_out(c))
            .transpose()
    }

    fn share_mem(
        &self,
        handle: csx_proto::MemHandle,
    ) -> Result<std::os::fd::OwnedFd, TransportError> {
        self.qp().share_mem(handle).map_err(|e| share_error(&e))
    }

    fn close(mut self: Box<Self>) -> Result<(), TransportError> {
        drop(self.qp.take());
        match self.device.take() {
            Some(device) => Embedded::close(device).map_err(|e| TransportError::CloseFailed {
                message: e.to_string(),
            }),
            None => Ok(()),
        }
    }
}

/// A refused [`QueuePair::share_mem`] as the transport error every transport gives.
pub(crate) fn share_error(e: &csx_device::slm::ShareError) -> TransportError {
    use csx_device::slm::{ShareError, SlmError};
    use std::io::ErrorKind;
    let kind = match e {
        ShareError::Slm(SlmError::InUse { .. }) => ErrorKind::ResourceBusy,
        ShareError::Slm(_) => ErrorKind::NotFound,
        ShareError::NotPages { .. } => ErrorKind::InvalidInput,
        ShareError::Io(io) => io.kind(),
        _ => ErrorKind::Other,
    };
    TransportError::Io {
        op: "map device memory",
        source: std::io::Error::new(kind, e.to_string()),
    }
}
