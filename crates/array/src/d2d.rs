//! Device-to-device transfer (INSTANT's COSTA forwarding): a member reads a range of
//! another member's storage (by tagged block address) or memory into its own memory.
//!
//! Embedded members run in this process, so the transfer is a copy between the two
//! members' device memories in chunks of at most `MEM_IO_SIZE_MAX`, staged in the
//! source member's memory; it crosses the modelled link once (source out, destination
//! in) and never the host's link. Members reached over tcp or shm have no direct
//! connection to each other in this build: the bytes travel through this process, and
//! the accounting says so (a host-mediated copy, the host link crossed twice).
//!
//! A read of blocks that are locked waits until they are unlocked ([`crate::locks`]).

use csx_host::proto::limits::MEM_IO_SIZE_MAX;
use csx_host::proto::{CopySource, MemHandle};
use csx_host::DeviceUri;

use crate::array::Array;
use crate::error::ArrayError;
use crate::locks::BlockRange;

/// How a transfer moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Within one member: no link.
    Local,
    /// Member to member, one link crossing.
    DeviceToDevice,
    /// Through the host: the host link twice.
    HostMediated,
}

impl Array {
    /// Whether member `m` runs in this process.
    pub fn is_embedded(&self, m: u16) -> bool {
        matches!(
            self.members()[usize::from(m)].device.uri(),
            DeviceUri::Embedded(_)
        )
    }

    fn route(&self, from: u16, to: u16) -> Route {
        if from == to {
            Route::Local
        } else if self.is_embedded(from) && self.is_embedded(to) {
            Route::DeviceToDevice
        } else {
            Route::HostMediated
        }
    }

    fn account(&self, route: Route, from: u16, to: u16, bytes: u64) {
        match route {
            Route::Local => {}
            Route::DeviceToDevice => self.links().d2d(from, to, bytes),
            Route::HostMediated => self.links().host_copy(from, to, bytes),
        }
    }

    /// Copies the blocks `ranges` (tagged, all on one member, back to back) into member
    /// `dst_member`'s allocation `dst` from `dst_offset`. Waits while any is locked.
    /// Returns the bytes copied and how they moved.
    pub fn d2d_read_blocks(
        &self,
        ranges: &[BlockRange],
        dst_member: u16,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<(u64, Route), ArrayError> {
        self.member_at(dst_member)?;
        let Some(first) = ranges.first() else {
            return Ok((0, Route::Local));
        };
        let src_member = first.member();
        for r in ranges {
            if r.member() != src_member {
                return Err(ArrayError::Other(format!(
                    "one transfer reads one member: ranges name members {src_member} and {}",
                    r.member()
                )));
            }
        }
        self.locks().wait_unlocked(ranges, None)?;
        let route = self.route(src_member, dst_member);
        let src = &self.members()[usize::from(src_member)].device;
        let dst_dev = &self.members()[usize::from(dst_member)].device;
        let mut at = dst_offset;
        if route == Route::Local {
            let sources = ranges
                .iter()
                .map(|r| CopySource::Nvm {
                    offset: r.start.byte_offset(),
                    len: r.len,
                })
                .collect();
            let n = dst_dev
                .copy_to_mem(dst, dst_offset, sources)
                .map_err(self.member_error(dst_member, "memory-copy"))?;
            return Ok((n, route));
        }
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        let staging_len = total.min(MEM_IO_SIZE_MAX);
        let staging = src
            .alloc(staging_len)
            .map_err(self.member_error(src_member, "memory-alloc"))?;
        let result = (|| {
            for r in ranges {
                let mut done = 0;
                while done < r.len {
                    let n = (r.len - done).min(staging_len);
                    src.copy_to_mem(
                        staging,
                        0,
                        vec![CopySource::Nvm {
                            offset: r.start.byte_offset() + done,
                            len: n,
                        }],
                    )
                    .map_err(self.member_error(src_member, "memory-copy"))?;
                    let bytes = src
                        .read_mem(staging, 0, n)
                        .map_err(self.member_error(src_member, "memory-read"))?;
                    dst_dev
                        .write_mem(dst, at, &bytes)
                        .map_err(self.member_error(dst_member, "memory-write"))?;
                    done += n;
                    at += n;
                }
            }
            Ok(())
        })();
        let freed = src
            .free(staging)
            .map_err(self.member_error(src_member, "memory-free"));
        result?;
        freed?;
        self.account(route, src_member, dst_member, total);
        Ok((total, route))
    }

    /// Copies `len` bytes of member `src_member`'s allocation `src` from `src_offset`
    /// into member `dst_member`'s allocation `dst` at `dst_offset`.
    #[allow(clippy::too_many_arguments)]
    pub fn d2d_copy_mem(
        &self,
        src_member: u16,
        src: MemHandle,
        src_offset: u64,
        len: u64,
        dst_member: u16,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<(u64, Route), ArrayError> {
        self.member_at(src_member)?;
        self.member_at(dst_member)?;
        let route = self.route(src_member, dst_member);
        let src_dev = &self.members()[usize::from(src_member)].device;
        let dst_dev = &self.members()[usize::from(dst_member)].device;
        if route == Route::Local {
            let n = dst_dev
                .copy_to_mem(
                    dst,
                    dst_offset,
                    vec![CopySource::Mem {
                        handle: src,
                        offset: src_offset,
                        len,
                    }],
                )
                .map_err(self.member_error(dst_member, "memory-copy"))?;
            return Ok((n, route));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MEM_IO_SIZE_MAX);
            let bytes = src_dev
                .read_mem(src, src_offset + done, n)
                .map_err(self.member_error(src_member, "memory-read"))?;
            dst_dev
                .write_mem(dst, dst_offset + done, &bytes)
                .map_err(self.member_error(dst_member, "memory-write"))?;
            done += n;
        }
        self.account(route, src_member, dst_member, len);
        Ok((len, route))
    }
}
