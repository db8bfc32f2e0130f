//! Host memory a transport lends the device for one command's data: the "DMA" of the
//! emulation.
//!
//! A transport whose host shares memory with the device (the shm transport's host-memory
//! region) hands a Memory Write's source or a Memory Read's destination to
//! [`crate::QueuePair::submit_with_buffer`] as a [`DmaBuffer`] instead of carrying the
//! bytes in the command. The transfer worker then copies straight between the buffer and
//! SLM: one copy, as a device's DMA engine makes, and no serialisation of the payload.
//!
//! Invariant: the device touches a buffer only through these two copies, only while the
//! command it came with is in flight, and drops it before the command's completion is
//! reaped.

use std::fmt;

/// Memory outside the device holding one command's data (see the module doc).
///
/// Implementations own whatever keeps the memory mapped (the device may hold the buffer
/// after the transport's connection is gone) and treat the bytes as untrusted: the
/// device copies them, it never interprets them in place.
pub trait DmaBuffer: Send + Sync + fmt::Debug {
    /// Bytes of the buffer.
    fn len(&self) -> usize;

    /// Whether the buffer holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the buffer into `dst`, which is exactly [`DmaBuffer::len`] bytes.
    fn read_into(&self, dst: &mut [u8]);

    /// Copies `src`, exactly [`DmaBuffer::len`] bytes, into the buffer.
    fn write_from(&self, src: &[u8]);
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use super::DmaBuffer;

    /// A heap buffer standing in for shared memory.
    #[derive(Debug)]
    pub(crate) struct HeapBuffer(pub Mutex<Vec<u8>>);

    impl DmaBuffer for HeapBuffer {
        fn len(&self) -> usize {
            self.0.lock().expect("not poisoned").len()
        }
        fn read_into(&self, dst: &mut [u8]) {
            dst.copy_from_slice(&self.0.lock().expect("not poisoned"));
        }
        fn write_from(&self, src: &[u8]) {
            self.0.lock().expect("not poisoned").copy_from_slice(src);
        }
    }
}
