//! Resident scans: the staged input columns of pushdown scans, kept in device memory
//! between scans on one device so that the next scan over the same columns stages
//! nothing and only runs its program over them.
//!
//! An entry holds, per chunk of a scan's plan (the table, the staged columns in the
//! program's input order, the chunk size and the row count),
//! the chunk's input window exactly as a fresh scan stages it, every block included (a
//! zone map skips nothing when staging into an entry), so any predicate over the same
//! columns may reuse it. The programs differ per predicate; the staged values do not.
//!
//! Staleness: before an entry is used, a one-byte sentinel of each of its files (the
//! schema and the column files) is copied as a resident range
//! (`CopySource::ResidentFile`). The device serves a resident range only while the
//! file's content version is the one it was read at, and the sentinels are first copied
//! before the entry is staged: a sentinel served from resident memory means no write,
//! truncate, rename or delete touched the file since. Any other answer (a write, the
//! device evicted the sentinel, a device without resident memory) restages the entry:
//! never a stale answer, at worst a fresh scan's cost.
//!
//! Memory: entries stay within a byte budget, least recently used first out; an entry
//! a scan is using (staging or reading it) is never evicted nor lent to a second scan
//! (that one stages into its own memory, as a fresh scan). A scan also borrows its
//! other windows (outputs, input windows without an entry, staged blocks) from the
//! keeper, kept between scans within the same budget: fresh device memory costs the host
//! a page fault and a zeroed page per 4 KiB, and memory a previous allocation used is
//! zeroed before a command may read it (for Q6 at SF 1 as much time as the scan's
//! program). A keeper made [`ResidentScans::windows_only`] keeps no inputs: every scan
//! through it stages, into kept windows.

use std::collections::HashMap;
use std::sync::Arc;

use csx_host::proto::MemHandle;

use crate::error::DataError;
use crate::ops::{self, Meter, Session};
use crate::stage::DeviceColumn;

/// Device memory resident scans keep by default: 1 GiB.
pub const RESIDENT_BUDGET_DEFAULT: u64 = 1 << 30;

/// One kept entry.
#[derive(Debug)]
struct Kept {
    chunks: Vec<MemHandle>,
    bytes: u64,
    files: Vec<String>,
    /// Its content is complete and was current at the last check.
    staged: bool,
    /// A scan holds it ([`Lease`]).
    busy: bool,
    used: u64,
    /// The staged columns' files as the staging opened them (headers and directories).
    columns: Option<Vec<Arc<DeviceColumn>>>,
}

/// An entry lent to one scan: per chunk its input window's allocation, and whether it
/// already holds the chunk's staged columns (`staged`: the scan stages nothing); and the
/// scan's other windows lent with it (outputs, and staged blocks while staging; empty
/// when the budget has no room). A lease of [`Lease::windows`] alone holds no entry.
#[derive(Debug)]
pub struct Lease {
    pub key: String,
    pub chunks: Vec<MemHandle>,
    pub staged: bool,
    /// Bytes of `chunks`, summed (each chunk's window at least 64).
    pub bytes: u64,
    pub windows: Vec<MemHandle>,
    /// With `staged`, the staged columns' files as opened when they were staged.
    pub columns: Option<Vec<Arc<DeviceColumn>>>,
}

impl Lease {
    /// A lease of windows alone (no entry: the scan stages into `windows`, which holds
    /// every window it uses).
    pub fn windows(windows: Vec<MemHandle>) -> Lease {
        Lease {
            key: String::new(),
            chunks: Vec::new(),
            staged: false,
            bytes: 0,
            windows,
            columns: None,
        }
    }

    /// Whether it lends an entry (the scan's staged inputs are kept).
    pub fn keeps_inputs(&self) -> bool {
        !self.key.is_empty()
    }
}

/// What [`ResidentScans::reuse`] found for a scan.
#[derive(Debug)]
pub enum Reuse {
    /// The entry, staged and unchanged: the scan stages nothing.
    Staged(Lease),
    /// The files were checked: [`ResidentScans::acquire`] gives the scan an entry to
    /// stage into once it knows its sizes.
    Checked(Checked),
    /// Nothing is kept for this scan (a keeper of windows only, or the entry is in use).
    Nothing,
}

/// A scan's entry and files, their sentinels copied before the scan opened the files.
#[derive(Debug)]
pub struct Checked {
    key: String,
    files: Vec<String>,
}

/// A kept output window: its allocation, bytes, and whether a scan holds it.
#[derive(Debug)]
struct Scratch {
    handle: MemHandle,
    bytes: u64,
    busy: bool,
}

/// What the keeper holds (see the module doc).
#[derive(Debug)]
pub struct ResidentScans<'d> {
    session: Session<'d>,
    budget: u64,
    used_bytes: u64,
    clock: u64,
    sentinel: Option<MemHandle>,
    entries: HashMap<String, Kept>,
    scratch: Vec<Scratch>,
    /// Keeps staged inputs (else it only lends windows: [`ResidentScans::windows_only`]).
    keeps_inputs: bool,
}

impl<'d> ResidentScans<'d> {
    /// Nothing kept yet; allocations made in `session` (closing the keeper frees
    /// them), at most `budget` bytes.
    pub fn new(session: Session<'d>, budget: u64) -> ResidentScans<'d> {
        ResidentScans {
            session,
            budget,
            used_bytes: 0,
            clock: 0,
            sentinel: None,
            entries: HashMap::new(),
            scratch: Vec::new(),
            keeps_inputs: true,
        }
    }

    /// A keeper that keeps no staged inputs, only scans' windows between scans (every
    /// scan through it stages, as a fresh one, into windows that are already mapped and
    /// need no zeroing: see [`ResidentScans::lend_windows`]).
    pub fn windows_only(session: Session<'d>, budget: u64) -> ResidentScans<'d> {
        ResidentScans {
            keeps_inputs: false,
            ..ResidentScans::new(session, budget)
        }
    }

    /// Bytes of device memory kept now, and entries.
    pub fn kept_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Bytes the entries' staged inputs take (the rest of [`ResidentScans::kept_bytes`]
    /// is windows lent to scans).
    pub fn entry_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.bytes).sum()
    }

    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// What the keeper has for a scan of entry `key` staged from `files`, their sentinels
    /// copied first (before the scan opens the files, so a write after this check is
    /// seen by the next one): the entry, staged and unchanged since, for a scan that
    /// stages nothing; or the files checked, for [`ResidentScans::acquire`] once the scan
    /// knows its sizes; or nothing to keep (a keeper of windows only, or another scan
    /// holds the entry). What the check cost is added to `meter`.
    pub fn reuse(
        &mut self,
        key: &str,
        files: &[String],
        meter: &mut Meter,
    ) -> Result<Reuse, DataError> {
        if !self.keeps_inputs || self.entries.get(key).is_some_and(|e| e.busy) {
            return Ok(Reuse::Nothing);
        }
        let before = self.session.meter;
        let unchanged = self.files_unchanged(files);
        meter.add(&self.session.meter.since(&before));
        let unchanged = unchanged?;
        self.clock += 1;
        let checked = Checked {
            key: key.to_string(),
            files: files.to_vec(),
        };
        let Some(e) = self.entries.get_mut(key) else {
            return Ok(Reuse::Checked(checked));
        };
        e.used = self.clock;
        e.staged &= unchanged && e.files == files;
        if !e.staged {
            return Ok(Reuse::Checked(checked));
        }
        e.busy = true;
        Ok(Reuse::Staged(Lease {
            key: checked.key,
            chunks: e.chunks.clone(),
            staged: true,
            bytes: e.bytes,
            windows: Vec::new(),
            columns: e.columns.clone(),
        }))
    }

    /// An entry to stage into for the scan [`ResidentScans::reuse`] checked (`sizes`:
    /// bytes of each chunk's input window): the entry's memory when it has these sizes,
    /// else new memory; `None` when it does not fit the budget. What allocating cost is
    /// added to `meter`.
    pub fn acquire(
        &mut self,
        checked: Checked,
        sizes: &[u64],
        meter: &mut Meter,
    ) -> Result<Option<Lease>, DataError> {
        let before = self.session.meter;
        let out = self.acquire_free(&checked.key, sizes, &checked.files);
        meter.add(&self.session.meter.since(&before));
        out
    }

    /// One idle window of at least `sizes[i]` bytes for each `i`, in that order, for a
    /// scan (given back with its lease: [`Lease::windows`]), made when missing (idle
    /// windows that fit no size asked freed first); none at all when they do not fit
    /// the budget. Each size gets the smallest idle window that fits it, the largest
    /// sizes first, so a scan asking for the windows it had before gets them back (a
    /// reused window needs no zeroing nor fresh pages: for Q6 at SF 1 as much host
    /// time as staging). What allocating cost is added to `meter`.
    pub fn lend_windows(
        &mut self,
        sizes: &[u64],
        meter: &mut Meter,
    ) -> Result<Vec<MemHandle>, DataError> {
        let before = self.session.meter;
        let out = self.lend_idle(sizes);
        meter.add(&self.session.meter.since(&before));
        out
    }

    fn lend_idle(&mut self, sizes: &[u64]) -> Result<Vec<MemHandle>, DataError> {
        let sizes: Vec<u64> = sizes.iter().map(|&b| b.max(64)).collect();
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
        let mut taken: Vec<Option<usize>> = vec![None; sizes.len()];
        let mut missing = Vec::new();
        for &i in &order {
            let best = (0..self.scratch.len())
                .filter(|&k| !self.scratch[k].busy && self.scratch[k].bytes >= sizes[i])
                .min_by_key(|&k| self.scratch[k].bytes);
            match best {
                Some(k) => {
                    self.scratch[k].busy = true;
                    taken[i] = Some(k);
                }
                None => missing.push(i),
            }
        }
        if !missing.is_empty() {
            // Idle windows no size fits are freed first, then least recently used
            // entries, to make room.
            let more: u64 = missing.iter().map(|&i| sizes[i]).sum();
            if self.used_bytes + more > self.budget {
                let unfit: Vec<usize> = (0..self.scratch.len())
                    .filter(|&k| !self.scratch[k].busy)
                    .collect();
                for k in unfit.into_iter().rev() {
                    let s = self.scratch.remove(k);
                    self.used_bytes -= s.bytes;
                    self.session.free(s.handle)?;
                    for t in taken.iter_mut().flatten() {
                        if *t > k {
                            *t -= 1;
                        }
                    }
                }
            }
            self.evict_for(more)?;
            if self.used_bytes + more > self.budget {
                for k in taken.into_iter().flatten() {
                    self.scratch[k].busy = false;
                }
                return Ok(Vec::new());
            }
            for &i in &missing {
                let handle = match ops::alloc(&mut self.session, sizes[i]) {
                    Ok(h) => h,
                    Err(_) => {
                        // The device's memory is short (idle windows of ours may be
                        // what holds it): give up lending, keep nothing idle, and
                        // let the scan allocate its own as it would without a keeper.
                        for k in taken.into_iter().flatten() {
                            self.scratch[k].busy = false;
                        }
                        self.free_idle_windows()?;
                        return Ok(Vec::new());
                    }
                };
                self.used_bytes += sizes[i];
                self.scratch.push(Scratch {
                    handle,
                    bytes: sizes[i],
                    busy: true,
                });
                taken[i] = Some(self.scratch.len() - 1);
            }
        }
        Ok(taken
            .into_iter()
            .map(|k| self.scratch[k.expect("every size was given a window")].handle)
            .collect())
    }

    /// Frees every window no scan holds.
    fn free_idle_windows(&mut self) -> Result<(), DataError> {
        let mut first = None;
        for k in (0..self.scratch.len()).rev() {
            if !self.scratch[k].busy {
                let s = self.scratch.remove(k);
                self.used_bytes -= s.bytes;
                if let Err(e) = self.session.free(s.handle) {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn acquire_free(
        &mut self,
        key: &str,
        sizes: &[u64],
        files: &[String],
    ) -> Result<Option<Lease>, DataError> {
        let bytes: u64 = sizes.iter().map(|&b| b.max(64)).sum();
        if let Some(e) = self.entries.get_mut(key) {
            if e.bytes == bytes && e.files == files {
                // Not staged ([`ResidentScans::reuse`] lent it otherwise): staged again.
                e.staged = false;
                e.busy = true;
                return Ok(Some(Lease {
                    key: key.to_string(),
                    chunks: e.chunks.clone(),
                    staged: false,
                    bytes,
                    windows: Vec::new(),
                    columns: None,
                }));
            }
            self.remove(key)?;
        }
        if bytes > self.budget {
            return Ok(None);
        }
        self.evict_for(bytes)?;
        if self.used_bytes + bytes > self.budget {
            // Every other entry is in use.
            return Ok(None);
        }
        let mut chunks = Vec::with_capacity(sizes.len());
        for &b in sizes {
            match ops::alloc(&mut self.session, b) {
                Ok(h) => chunks.push(h),
                Err(e) => {
                    for h in chunks {
                        let _ = self.session.free(h);
                    }
                    return Err(e);
                }
            }
        }
        self.used_bytes += bytes;
        let kept = Kept {
            chunks: chunks.clone(),
            bytes,
            files: files.to_vec(),
            staged: false,
            busy: true,
            used: self.clock,
            columns: None,
        };
        self.entries.insert(key.to_string(), kept);
        Ok(Some(Lease {
            key: key.to_string(),
            chunks,
            staged: false,
            bytes,
            windows: Vec::new(),
            columns: None,
        }))
    }

    /// Gives the entry back: `complete` says every chunk of it is staged (a scan that
    /// failed or stopped early leaves it to be staged again); `columns`: the staged
    /// columns' files the scan opened (kept for the next scan while the entry is).
    pub fn release(
        &mut self,
        lease: Lease,
        complete: bool,
        columns: Option<Vec<Arc<DeviceColumn>>>,
    ) {
        for s in &mut self.scratch {
            if lease.windows.contains(&s.handle) {
                s.busy = false;
            }
        }
        if let Some(e) = self.entries.get_mut(&lease.key) {
            e.busy = false;
            e.staged = lease.staged || complete;
            if complete && !lease.staged {
                e.columns = columns;
            }
        }
    }

    /// Whether every file of `files` is unchanged since its sentinel was first copied
    /// ([`ops::files_unchanged`]).
    fn files_unchanged(&mut self, files: &[String]) -> Result<bool, DataError> {
        let sentinel = match self.sentinel {
            Some(h) => h,
            None => *self
                .sentinel
                .insert(ops::alloc(&mut self.session, ops::SENTINELS_BYTES)?),
        };
        Ok(ops::files_unchanged(&mut self.session, sentinel, files))
    }

    fn remove(&mut self, key: &str) -> Result<(), DataError> {
        if let Some(e) = self.entries.remove(key) {
            self.used_bytes -= e.bytes;
            for h in e.chunks {
                self.session.free(h)?;
            }
        }
        Ok(())
    }

    /// Frees least recently used entries no scan holds until `bytes` more fit (or
    /// every entry left is in use).
    fn evict_for(&mut self, bytes: u64) -> Result<(), DataError> {
        while self.used_bytes + bytes > self.budget {
            let oldest = (self.entries.iter())
                .filter(|(_, e)| !e.busy)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => self.remove(&key)?,
                None => break,
            }
        }
        Ok(())
    }

    /// Frees everything kept; what keeping it cost.
    pub fn close(self) -> Result<Meter, DataError> {
        Ok(self.session.close()?)
    }
}
