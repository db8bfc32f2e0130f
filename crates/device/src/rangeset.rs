//! Memory range sets (TP4091 Memory Range Set Management): ordered lists of SLM ranges
//! registered once and named by an RSID in many Execute commands.
//!
//! Invariants:
//! * At most [`RANGE_SETS_MAX`] sets exist; RSID 0 is never used.
//! * When a set was created, each range lay inside an allocation of its owner and no
//!   two ranges overlapped. Allocations can be freed afterwards, so an Execute resolves
//!   the ranges against the SLM again (through its leases).
//! * A set with executions in flight is not deleted (status 95h).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use csx_proto::limits::{RANGES_PER_SET_MAX, RANGE_SETS_MAX, WINDOW_SIZE_MAX};
use csx_proto::{ClientId, MemRange, RangeSetId};

use crate::slm::{Slm, SlmError};

/// Why a range set operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeSetError {
    #[error("{count} range sets exist, limit is {RANGE_SETS_MAX}")]
    TooManySets { count: usize },
    #[error("{count} ranges, limit is {RANGES_PER_SET_MAX}")]
    TooManyRanges { count: usize },
    #[error("range {index} is empty or longer than {WINDOW_SIZE_MAX} bytes")]
    BadLength { index: usize },
    #[error("range {index}: {source}")]
    Memory { index: usize, source: SlmError },
    #[error("ranges {first} and {second} overlap")]
    Overlap { first: usize, second: usize },
    #[error("no range set {rsid} for this client")]
    Unknown { rsid: RangeSetId },
    #[error("range set {rsid} is used by {count} executions in flight")]
    InUse { rsid: RangeSetId, count: u32 },
}

/// Checks a list of ranges that will become windows: count, lengths, overlap. Used for
/// range sets and for inline Execute ranges alike.
pub fn check_ranges(ranges: &[MemRange]) -> Result<(), RangeSetError> {
    if ranges.len() > RANGES_PER_SET_MAX {
        return Err(RangeSetError::TooManyRanges {
            count: ranges.len(),
        });
    }
    for (i, r) in ranges.iter().enumerate() {
        if r.len == 0 || r.len > WINDOW_SIZE_MAX || r.offset.checked_add(r.len).is_none() {
            return Err(RangeSetError::BadLength { index: i });
        }
    }
    for i in 0..ranges.len() {
        for j in i + 1..ranges.len() {
            let (a, b) = (&ranges[i], &ranges[j]);
            if a.handle == b.handle && a.offset < b.offset + b.len && b.offset < a.offset + a.len {
                return Err(RangeSetError::Overlap {
                    first: i,
                    second: j,
                });
            }
        }
    }
    Ok(())
}

#[derive(Debug)]
struct Entry {
    owner: ClientId,
    ranges: Arc<[MemRange]>,
    in_use: u32,
}

#[derive(Debug, Default)]
struct Inner {
    sets: HashMap<RangeSetId, Entry>,
    next: u16,
}

/// The device's range sets.
#[derive(Debug, Default)]
pub struct RangeSets {
    inner: Mutex<Inner>,
}

/// A range set held by an execution; the set cannot be deleted until this drops.
#[derive(Debug)]
pub struct RangeSetUse<'a> {
    sets: &'a RangeSets,
    rsid: RangeSetId,
    /// The set's ranges, in window order.
    pub ranges: Arc<[MemRange]>,
}

impl Drop for RangeSetUse<'_> {
    fn drop(&mut self) {
        let mut inner = self.sets.lock();
        let e = inner
            .sets
            .get_mut(&self.rsid)
            .expect("a set in use is not deleted");
        e.in_use -= 1;
    }
}

impl RangeSets {
    /// No sets.
    pub fn new() -> RangeSets {
        RangeSets::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // See `Slm::lock`: the table is never left half-updated.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `ranges` for `owner`, checking them against its allocations.
    pub fn create(
        &self,
        slm: &Slm,
        owner: ClientId,
        ranges: &[MemRange],
    ) -> Result<RangeSetId, RangeSetError> {
        check_ranges(ranges)?;
        if ranges.is_empty() {
            return Err(RangeSetError::BadLength { index: 0 });
        }
        // The lock is held across the SLM checks so that a concurrent reclaim of this
        // client (which takes this lock first) cannot slip between check and insert.
        let mut inner = self.lock();
        for (i, r) in ranges.iter().enumerate() {
            let size = slm
                .size_of(owner, r.handle)
                .map_err(|source| RangeSetError::Memory { index: i, source })?;
            if r.offset + r.len > size {
                let source = SlmError::OutOfRange {
                    handle: r.handle,
                    offset: r.offset,
                    len: r.len,
                    size_bytes: size,
                };
                return Err(RangeSetError::Memory { index: i, source });
            }
        }
        if inner.sets.len() >= usize::from(RANGE_SETS_MAX) {
            return Err(RangeSetError::TooManySets {
                count: inner.sets.len(),
            });
        }
        let rsid = loop {
            inner.next = inner.next.wrapping_add(1);
            let id = RangeSetId(inner.next);
            if id != RangeSetId::NONE && !inner.sets.contains_key(&id) {
                break id;
            }
        };
        inner.sets.insert(
            rsid,
            Entry {
                owner,
                ranges: ranges.into(),
                in_use: 0,
            },
        );
        Ok(rsid)
    }

    /// Deletes `owner`'s set `rsid`.
    pub fn delete(&self, owner: ClientId, rsid: RangeSetId) -> Result<(), RangeSetError> {
        let mut inner = self.lock();
        match inner.sets.get(&rsid) {
            Some(e) if e.owner == owner && e.in_use > 0 => Err(RangeSetError::InUse {
                rsid,
                count: e.in_use,
            }),
            Some(e) if e.owner == owner => {
                inner.sets.remove(&rsid);
                Ok(())
            }
            _ => Err(RangeSetError::Unknown { rsid }),
        }
    }

    /// Holds `owner`'s set `rsid` for an execution.
    pub fn acquire(
        &self,
        owner: ClientId,
        rsid: RangeSetId,
    ) -> Result<RangeSetUse<'_>, RangeSetError> {
        let mut inner = self.lock();
        match inner.sets.get_mut(&rsid) {
            Some(e) if e.owner == owner => {
                e.in_use += 1;
                Ok(RangeSetUse {
                    sets: self,
                    rsid,
                    ranges: Arc::clone(&e.ranges),
                })
            }
            _ => Err(RangeSetError::Unknown { rsid }),
        }
    }

    /// Deletes every set of `owner` that no execution holds (a departed client's; the
    /// held ones go when their executions end, as nobody can name them any more).
    pub fn reclaim(&self, owner: ClientId) {
        self.lock()
            .sets
            .retain(|_, e| e.owner != owner || e.in_use > 0);
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.lock().sets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ToStatus;
    use csx_proto::MemHandle;
    use csx_proto::Status;

    const A: ClientId = ClientId(1);

    fn r(handle: MemHandle, offset: u64, len: u64) -> MemRange {
        MemRange {
            handle,
            offset,
            len,
        }
    }

    #[test]
    fn create_validate_delete() {
        let slm = Slm::new(1 << 16);
        slm.register_client(A);
        slm.register_client(ClientId(2));
        let h = slm.alloc(A, 1024).unwrap();
        let sets = RangeSets::new();
        let id = sets
            .create(&slm, A, &[r(h, 0, 512), r(h, 512, 512)])
            .unwrap();
        assert_ne!(id, RangeSetId::NONE);
        let e = sets
            .create(&slm, A, &[r(h, 0, 512), r(h, 511, 2)])
            .unwrap_err();
        assert_eq!(e.status(), Status::OverlappingMemoryRanges);
        let e = sets.create(&slm, A, &[r(h, 1000, 25)]).unwrap_err();
        assert_eq!(e.status(), Status::InvalidMemoryRangeSet);
        let e = sets.create(&slm, ClientId(2), &[r(h, 0, 1)]).unwrap_err();
        assert_eq!(e.status(), Status::InvalidMemoryNamespace);
        let e = sets.create(&slm, A, &vec![r(h, 0, 1); 17]).unwrap_err();
        assert_eq!(e.status(), Status::MaximumMemoryRangesExceeded);
        {
            let held = sets.acquire(A, id).unwrap();
            assert_eq!(held.ranges.len(), 2);
            assert_eq!(
                sets.delete(A, id).unwrap_err().status(),
                Status::MemoryRangeSetInUse
            );
        }
        assert_eq!(
            sets.delete(ClientId(2), id).unwrap_err().status(),
            Status::InvalidMemoryRangeSetId
        );
        sets.delete(A, id).unwrap();
        assert_eq!(
            sets.delete(A, id).unwrap_err().status(),
            Status::InvalidMemoryRangeSetId
        );
    }

    #[test]
    fn set_count_is_bounded() {
        let slm = Slm::new(1 << 16);
        slm.register_client(A);
        let h = slm.alloc(A, 64).unwrap();
        let sets = RangeSets::new();
        for _ in 0..RANGE_SETS_MAX {
            sets.create(&slm, A, &[r(h, 0, 1)]).unwrap();
        }
        let e = sets.create(&slm, A, &[r(h, 0, 1)]).unwrap_err();
        assert_eq!(e.status(), Status::MaximumMemoryRangeSetsExceeded);
        sets.reclaim(A);
        assert!(sets.is_empty());
    }
}
