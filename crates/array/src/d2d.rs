//! Device-to-device transfer (INSTANT's COSTA forwarding): a member reads a range of
//! another member's storage (by tagged block address) or memory into its own memory.
//!
//! * Embedded members run in this process, so the transfer is a copy between the two
//!   members' device memories in chunks of at most `MEM_IO_SIZE_MAX`, staged in the
//!   source member's memory; it crosses the modelled link once (source out,
//!   destination in) and never the host's link.
//! * Members served over tcp read each other's storage themselves: the destination
//!   daemon gets a Memory Copy whose source is a peer range (`CopySource::Peer`, the
//!   source member's URI), connects to the source daemon and pulls the blocks into its
//!   own memory. One crossing of the D2D link, none of the host link. A peer that dies
//!   mid-transfer fails the copy with an error naming the source member.
//! * Memory of a served member belongs to this client's connection, which another
//!   daemon cannot use; those copies, and any between other kinds of members, travel
//!   through this process and are accounted as such (a host-mediated copy, the host
//!   link crossed twice).
//!
//! A read of blocks that are locked waits until they are unlocked ([`crate::locks`]).

use csx_host::proto::limits::{COPY_SIZE_MAX, COPY_SOURCES_MAX, MEM_IO_SIZE_MAX};
use csx_host::proto::Status;
use csx_host::proto::{CopySource, MemHandle, Op, Reply};
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
    /// Daemon to daemon: the destination pulls from its peer, one link crossing.
    Peer,
    /// Through the host: the host link twice.
    HostMediated,
}

/// A place in one member's device memory: an allocation and an offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAt {
    pub member: u16,
    pub handle: MemHandle,
    pub offset: u64,
}

impl MemAt {
    /// The place `bytes` further on.
    pub fn plus(self, bytes: u64) -> MemAt {
        MemAt {
            offset: self.offset + bytes,
            ..self
        }
    }
}

impl Array {
    /// Whether member `m` runs in this process.
    pub fn is_embedded(&self, m: u16) -> bool {
        matches!(
            self.members()[usize::from(m)].device.uri(),
            DeviceUri::Embedded(_)
        )
    }

    /// Whether member `m` is a daemon reached over plain tcp (which serves peers).
    pub fn is_tcp(&self, m: u16) -> bool {
        matches!(
            self.members()[usize::from(m)].device.uri(),
            DeviceUri::Tcp { .. }
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

    /// How blocks of `from` reach `to`: as [`Array::route`], but two tcp daemons
    /// transfer storage between themselves.
    pub fn block_route(&self, from: u16, to: u16) -> Route {
        if from != to && self.is_tcp(from) && self.is_tcp(to) {
            Route::Peer
        } else {
            self.route(from, to)
        }
    }

    fn account(&self, route: Route, from: u16, to: u16, bytes: u64) {
        match route {
            Route::Local => {}
            Route::DeviceToDevice | Route::Peer => self.links().d2d(from, to, bytes),
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
        let route = self.block_route(src_member, dst_member);
        let dst_dev = &self.members()[usize::from(dst_member)].device;
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
        let to = MemAt {
            member: dst_member,
            handle: dst,
            offset: dst_offset,
        };
        if route == Route::Peer {
            self.read_blocks_peer(ranges, src_member, to)?;
        } else {
            self.read_blocks_staged(ranges, src_member, to, total)?;
        }
        self.account(route, src_member, dst_member, total);
        Ok((total, route))
    }

    /// The ranges (all on `src_member`) pulled by `dst`'s daemon from the source's
    /// daemon, in Memory Copy commands within the protocol's limits.
    fn read_blocks_peer(
        &self,
        ranges: &[BlockRange],
        src_member: u16,
        dst: MemAt,
    ) -> Result<(), ArrayError> {
        let dst_dev = &self.members()[usize::from(dst.member)].device;
        let (dst_member, dst_offset, dst) = (dst.member, dst.offset, dst.handle);
        let peer = self.members()[usize::from(src_member)].uri.clone();
        let sources: Vec<CopySource> = ranges
            .iter()
            .map(|r| CopySource::Peer {
                peer: peer.clone(),
                offset: r.start.byte_offset(),
                len: r.len,
            })
            .collect();
        // Within the protocol's limits per command: sources and bytes.
        let mut at = dst_offset;
        let mut batch: Vec<CopySource> = Vec::new();
        let mut batch_len = 0;
        let flush = |batch: &mut Vec<CopySource>, at: &mut u64, n: u64| {
            if batch.is_empty() {
                return Ok(());
            }
            dst_dev
                .copy_to_mem(dst, *at, std::mem::take(batch))
                .map_err(|e| {
                    if e.status() == Some(Status::NamespaceNotReachable) {
                        self.member_error(src_member, "peer-read")(e)
                    } else {
                        self.member_error(dst_member, "memory-copy")(e)
                    }
                })?;
            *at += n;
            Ok::<(), ArrayError>(())
        };
        for s in sources {
            let n = s.len();
            if batch.len() == COPY_SOURCES_MAX || batch_len + n > COPY_SIZE_MAX {
                flush(&mut batch, &mut at, batch_len)?;
                batch_len = 0;
            }
            batch.push(s);
            batch_len += n;
        }
        flush(&mut batch, &mut at, batch_len)?;
        Ok(())
    }

    /// The ranges (all on `src_member`) staged through the source's memory and written
    /// to `dst` by the host, a staging buffer at a time; the buffer is freed whatever
    /// happened.
    fn read_blocks_staged(
        &self,
        ranges: &[BlockRange],
        src_member: u16,
        dst: MemAt,
        total: u64,
    ) -> Result<(), ArrayError> {
        let src = &self.members()[usize::from(src_member)].device;
        let dst_dev = &self.members()[usize::from(dst.member)].device;
        let (dst_member, mut at, dst) = (dst.member, dst.offset, dst.handle);
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
        freed
    }

    /// Copies `len` bytes of device memory from `src` (on its member) to `dst`.
    pub fn d2d_copy_mem(
        &self,
        src: MemAt,
        dst: MemAt,
        len: u64,
    ) -> Result<(u64, Route), ArrayError> {
        let (src_member, dst_member) = (src.member, dst.member);
        self.member_at(src_member)?;
        self.member_at(dst_member)?;
        let route = self.route(src_member, dst_member);
        if route == Route::Local {
            let n = self.members()[usize::from(dst_member)]
                .device
                .copy_to_mem(
                    dst.handle,
                    dst.offset,
                    vec![CopySource::Mem {
                        handle: src.handle,
                        offset: src.offset,
                        len,
                    }],
                )
                .map_err(self.member_error(dst_member, "memory-copy"))?;
            return Ok((n, route));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MEM_IO_SIZE_MAX);
            let at = |m: MemAt| MemAt {
                offset: m.offset + done,
                ..m
            };
            self.relay_chunk(at(src), at(dst), n)?;
            done += n;
        }
        self.account(route, src_member, dst_member, len);
        Ok((len, route))
    }

    /// One chunk of a copy between members through the host: the source device's
    /// reply buffer is the chunk written, one copy out of the source's memory, one into
    /// the destination's, none in between.
    fn relay_chunk(&self, src: MemAt, dst: MemAt, n: u64) -> Result<(), ArrayError> {
        let src_dev = &self.members()[usize::from(src.member)].device;
        let dst_dev = &self.members()[usize::from(dst.member)].device;
        let reply = src_dev
            .client()
            .call_ok(Op::MemRead {
                handle: src.handle,
                offset: src.offset,
                len: n,
            })
            .map_err(self.member_error(src.member, "memory-read"))?
            .reply;
        let bytes = match reply {
            Reply::Data(d) if d.len() as u64 == n => d,
            other => {
                let got = match other {
                    Reply::Data(d) => d.len(),
                    _ => 0,
                };
                return Err(ArrayError::Other(format!(
                    "array member {}: a memory read of {n} bytes returned {got}",
                    src.member
                )));
            }
        };
        dst_dev
            .client()
            .call_ok(Op::MemWrite {
                handle: dst.handle,
                offset: dst.offset,
                data: bytes,
            })
            .map_err(self.member_error(dst.member, "memory-write"))?;
        Ok(())
    }
}
