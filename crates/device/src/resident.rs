//! Resident file ranges: bytes of device files a Memory Copy asked to keep
//! (`CopySource::ResidentFile`), held in device memory between commands and clients so
//! that the next copy of the same range does not read the media again.
//!
//! * **Budget.** At most [`Resident::budget`] bytes are held, whatever the clients do: an
//!   entry that would pass it evicts the least recently used ones first, and a range
//!   larger than the whole budget is read and not kept. The budget is the device's
//!   (`DeviceConfig::resident_bytes`, or `csx device serve --resident-memory`), not a
//!   client's: entries belong to no client, so a client that goes away leaves nothing
//!   behind but what the budget already bounds.
//! * **Validity.** An entry is keyed by (path, offset, length) and remembers the file's
//!   content version (`FileStore::version`) taken before its bytes were read. Every write,
//!   truncate, delete or rename of the path (by any client, a program's
//!   `csx_file_write`, or a rename over it) changes the version, so a stale entry is never
//!   served: it is dropped on its next lookup.
//! * **No partial reuse.** Only the same range hits; this is what the SSB staging and the
//!   scan repeat query after query.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What identifies a resident range.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    path: String,
    offset: u64,
    len: u64,
}

#[derive(Debug)]
struct Entry {
    version: u64,
    bytes: Arc<[u8]>,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    budget: u64,
    used: u64,
    clock: u64,
    entries: HashMap<Key, Entry>,
    hits: u64,
    misses: u64,
}

impl Inner {
    /// Evicts least recently used entries until `need` more bytes fit the budget.
    fn make_room(&mut self, need: u64) {
        while self.used + need > self.budget {
            let Some(oldest) = (self.entries.iter())
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                return;
            };
            self.remove(&oldest);
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(e) = self.entries.remove(key) {
            self.used -= e.bytes.len() as u64;
        }
    }
}

/// What [`Resident::stats`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidentStats {
    pub budget: u64,
    pub used: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
}

/// The device's resident ranges (see the module doc).
#[derive(Debug, Default)]
pub struct Resident {
    inner: Mutex<Inner>,
}

impl Resident {
    /// Resident memory of `budget` bytes (0: nothing is kept).
    pub fn new(budget: u64) -> Resident {
        Resident {
            inner: Mutex::new(Inner {
                budget,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the map and its byte count consistent before it can panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn budget(&self) -> u64 {
        self.lock().budget
    }

    /// Changes the budget; lowering it evicts at once.
    pub fn set_budget(&self, budget: u64) {
        let mut inner = self.lock();
        inner.budget = budget;
        inner.make_room(0);
    }

    /// The bytes of `len` at `offset` of `path` if they are resident at `version`; a
    /// stale entry (another version) is dropped.
    pub fn get(&self, path: &str, offset: u64, len: u64, version: u64) -> Option<Arc<[u8]>> {
        let key = Key {
            path: path.to_string(),
            offset,
            len,
        };
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        match inner.entries.get_mut(&key) {
            Some(e) if e.version == version => {
                e.last_used = now;
                let bytes = Arc::clone(&e.bytes);
                inner.hits += 1;
                Some(bytes)
            }
            Some(_) => {
                inner.remove(&key);
                inner.misses += 1;
                None
            }
            None => {
                inner.misses += 1;
                None
            }
        }
    }

    /// Keeps `bytes` (read at content `version`) as the range `len` at `offset` of
    /// `path`, evicting the least recently used ranges to stay within the budget; a
    /// range larger than the budget is not kept. Returns whether it was kept.
    pub fn insert(&self, path: &str, offset: u64, version: u64, bytes: &[u8]) -> bool {
        let len = bytes.len() as u64;
        let key = Key {
            path: path.to_string(),
            offset,
            len,
        };
        let mut inner = self.lock();
        if len == 0 || len > inner.budget {
            return false;
        }
        inner.remove(&key);
        inner.make_room(len);
        inner.clock += 1;
        let last_used = inner.clock;
        inner.used += len;
        inner.entries.insert(
            key,
            Entry {
                version,
                bytes: Arc::from(bytes),
                last_used,
            },
        );
        true
    }

    pub fn stats(&self) -> ResidentStats {
        let inner = self.lock();
        ResidentStats {
            budget: inner.budget,
            used: inner.used,
            entries: inner.entries.len() as u64,
            hits: inner.hits,
            misses: inner.misses,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_only_at_the_same_version_and_range() {
        let r = Resident::new(100);
        assert!(r.insert("/t/a.col", 0, 7, &[1; 40]));
        assert_eq!(r.get("/t/a.col", 0, 40, 7).as_deref(), Some(&[1u8; 40][..]));
        // Another range of the same file, another file: misses.
        assert!(r.get("/t/a.col", 0, 39, 7).is_none());
        assert!(r.get("/t/b.col", 0, 40, 7).is_none());
        // The file changed: the entry is dropped, its bytes given back.
        assert!(r.get("/t/a.col", 0, 40, 8).is_none());
        assert_eq!(r.stats().used, 0);
        assert!(r.get("/t/a.col", 0, 40, 7).is_none());
    }

    #[test]
    fn never_holds_more_than_the_budget() {
        let r = Resident::new(100);
        for i in 0..50u64 {
            r.insert("/f", i * 30, 1, &[0; 30]);
            assert!(r.stats().used <= 100, "after {i}: {:?}", r.stats());
            // The most recent entry is always kept.
            assert!(r.get("/f", i * 30, 30, 1).is_some());
        }
        assert_eq!(r.stats().entries, 3);
        assert!(!r.insert("/big", 0, 1, &[0; 101]), "larger than the budget");
        assert!(r.stats().used <= 100);
        r.set_budget(40);
        assert!(r.stats().used <= 40);
        assert!(!Resident::new(0).insert("/f", 0, 1, &[0; 1]));
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let r = Resident::new(90);
        r.insert("/a", 0, 1, &[0; 30]);
        r.insert("/b", 0, 1, &[0; 30]);
        r.insert("/c", 0, 1, &[0; 30]);
        // /a is used again, so /b is the oldest when /d comes.
        assert!(r.get("/a", 0, 30, 1).is_some());
        r.insert("/d", 0, 1, &[0; 30]);
        assert!(r.get("/b", 0, 30, 1).is_none());
        for p in ["/a", "/c", "/d"] {
            assert!(r.get(p, 0, 30, 1).is_some(), "{p}");
        }
    }
}
