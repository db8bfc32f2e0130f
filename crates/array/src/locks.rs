//! Block locks (COSTA's, thesis §3.1 and §5.1): an operation locks the tagged block
//! ranges it will produce; any other operation that wants to read or lock an
//! overlapping range waits until they are unlocked. A merge sort submits its sorts and
//! its merges at once and the locks order them: each sort locks its output, each merge
//! waits on the outputs it reads.
//!
//! Locks are held by a [`LockGuard`]. Dropping the guard unlocks, so an operation that
//! fails, or a thread that dies (panics) holding locks, loses them; nothing can leave a
//! range locked forever. A lock request takes all its ranges at once or none (no
//! partial holds, so two requests cannot deadlock on each other).
//!
//! Requests are checked before they wait: a tag naming no member, a range past the end
//! of its member's NVM namespace, and an empty range are typed errors naming the value
//! and the limit.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::ArrayError;
use crate::tag::TaggedAddr;

/// A byte range of one member's NVM namespace, named by its first tagged address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BlockRange {
    pub start: TaggedAddr,
    pub len: u64,
}

impl BlockRange {
    pub fn member(&self) -> u16 {
        self.start.member()
    }

    fn bounds(&self) -> (u64, u64) {
        let s = self.start.byte_offset();
        (s, s + self.len)
    }

    fn overlaps(&self, other: &BlockRange) -> bool {
        let (a0, a1) = self.bounds();
        let (b0, b1) = other.bounds();
        self.member() == other.member() && a0 < b1 && b0 < a1
    }
}

#[derive(Debug)]
struct Held {
    owner: u64,
    label: String,
    range: BlockRange,
}

#[derive(Debug, Default)]
struct State {
    held: Vec<Held>,
    next_owner: u64,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    nvm_sizes: Vec<u64>,
}

/// The array's lock table; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct LockTable {
    inner: Arc<Inner>,
}

/// Locks held by one owner; dropping it unlocks them all.
#[derive(Debug)]
pub struct LockGuard {
    inner: Arc<Inner>,
    owner: u64,
}

impl LockGuard {
    /// The owner id (for diagnostics).
    pub fn owner(&self) -> u64 {
        self.owner
    }

    /// Unlocks now (the same as dropping).
    pub fn unlock(self) {}
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        st.held.retain(|h| h.owner != self.owner);
        drop(st);
        self.inner.changed.notify_all();
    }
}

impl LockTable {
    /// A table for members whose NVM namespaces have these sizes.
    pub fn new(nvm_sizes: Vec<u64>) -> LockTable {
        LockTable {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                nvm_sizes,
            }),
        }
    }

    /// Checks a range against the members: its tag, its end, its length.
    pub fn check(&self, r: &BlockRange) -> Result<(), ArrayError> {
        let members = self.inner.nvm_sizes.len();
        let m = r.member();
        let Some(&limit) = self.inner.nvm_sizes.get(usize::from(m)) else {
            return Err(ArrayError::NoSuchMember {
                tag: m,
                members: members as u16,
            });
        };
        if r.len == 0 {
            return Err(ArrayError::OutOfRange {
                what: "lock range length",
                value: 0,
                min: 1,
                max: limit,
            });
        }
        let offset = r.start.byte_offset();
        if offset.checked_add(r.len).is_none_or(|end| end > limit) {
            return Err(ArrayError::RangeOutOfBounds {
                member: m,
                offset,
                len: r.len,
                limit,
            });
        }
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conflicts(st: &State, ranges: &[BlockRange]) -> bool {
        st.held
            .iter()
            .any(|h| ranges.iter().any(|r| r.overlaps(&h.range)))
    }

    /// Locks every range in `ranges`, waiting (up to `timeout`, `None`: forever) while
    /// any overlaps a held lock. `label` names the operation in [`LockTable::held`].
    pub fn lock(
        &self,
        label: &str,
        ranges: &[BlockRange],
        timeout: Option<Duration>,
    ) -> Result<LockGuard, ArrayError> {
        for r in ranges {
            self.check(r)?;
        }
        let st = self.wait_clear(ranges, timeout)?;
        let mut st = st;
        let owner = st.next_owner;
        st.next_owner += 1;
        st.held.extend(ranges.iter().map(|&range| Held {
            owner,
            label: label.to_string(),
            range,
        }));
        Ok(LockGuard {
            inner: Arc::clone(&self.inner),
            owner,
        })
    }

    /// Waits (up to `timeout`) until no held lock overlaps `ranges`: what a read of
    /// locked blocks does.
    pub fn wait_unlocked(
        &self,
        ranges: &[BlockRange],
        timeout: Option<Duration>,
    ) -> Result<(), ArrayError> {
        for r in ranges {
            self.check(r)?;
        }
        self.wait_clear(ranges, timeout).map(drop)
    }

    fn wait_clear(
        &self,
        ranges: &[BlockRange],
        timeout: Option<Duration>,
    ) -> Result<MutexGuard<'_, State>, ArrayError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.state();
        while Self::conflicts(&st, ranges) {
            st = match deadline {
                None => self
                    .inner
                    .changed
                    .wait(st)
                    .unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        let holder = st
                            .held
                            .iter()
                            .find(|h| ranges.iter().any(|r| r.overlaps(&h.range)))
                            .map(|h| h.label.clone())
                            .unwrap_or_default();
                        return Err(ArrayError::Other(format!(
                            "blocks still locked by {holder:?} after {:?}",
                            timeout.unwrap_or_default()
                        )));
                    }
                    self.inner
                        .changed
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        Ok(st)
    }

    /// The locks held now: `(owner, label, range)`.
    pub fn held(&self) -> Vec<(u64, String, BlockRange)> {
        self.state()
            .held
            .iter()
            .map(|h| (h.owner, h.label.clone(), h.range))
            .collect()
    }
}
