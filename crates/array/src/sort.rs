//! Distributed merge sort over an array (INSTANT's merge sort, thesis §4.1-4.2), of
//! little-endian u64 keys.
//!
//! 1. Every member holding part of the input sorts its part on the device: a Memory
//!    Copy of its piece into device memory, an Execute of a two-instruction program
//!    calling the registered function `csx_sort_u64`, and a File Write From Memory into
//!    a run file on the same member. Before anything starts, each run file's blocks are
//!    locked; a sort unlocks its run when it completes.
//! 2. The merges are submitted at the same time and wait on those locks (COSTA's
//!    ordering): a merge reads a run only once its sort has unlocked it.
//!    * `Instant` + `Chain` (the thesis's topology, inferred for N > 2): the first
//!      member merges every other member's run into its own in turn, each run moved
//!      device to device by tagged block address.
//!    * `Instant` + `Tree`: pairs of members merge in parallel rounds (log2 N rounds),
//!      the runs moved device to device memory to memory. Our improvement.
//!    * `Host` (Intel OAS, the thesis's baseline): the same sorts, then each run is read
//!      by the host and written to the merging member (the host link twice), then
//!      merged there.
//!
//!    Merges run `csx_merge_u64` on the merging member.
//! 3. The result is written to a fresh member file and named by the catalog only on
//!    success (the atomic "rename"): a failure leaves the input and any old output as
//!    they were, releases every lock and deletes the run files.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use csx_host::proto::{CopySource, EngineKind, MemHandle, MemRange, ProgramIndex, ProgramType};
use csx_host::{Device, ExecuteRequest};
use serde::Serialize;

use crate::array::{piece_sizes, Array};
use crate::desc::{normalize_path, FileEntry, Layout};
use crate::error::ArrayError;
use crate::link::LinkCounters;
use crate::locks::{BlockRange, LockGuard};
use crate::tag::TaggedAddr;

/// Bytes of one u64 key.
pub const KEY_BYTES: u64 = 8;

/// Largest device-side copy a sort issues in one command (within `COPY_SIZE_MAX`).
const CHUNK: u64 = 256 << 20;

/// Largest File Write From Memory: the protocol's file I/O limit.
const WRITE_CHUNK: u64 = csx_host::proto::limits::FILE_IO_SIZE_MAX;

/// How the runs merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SortMode {
    /// Runs move device to device (INSTANT).
    Instant,
    /// Runs move through the host (the Intel OAS baseline).
    Host,
}

/// Merge topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One member merges every other run in turn (N - 1 merges).
    Chain,
    /// Pairwise rounds (ceil(log2 N) rounds, merges of a round in parallel).
    Tree,
}

/// What to sort and how.
#[derive(Clone, Debug)]
pub struct SortOptions {
    pub mode: SortMode,
    pub topology: Topology,
    /// Where the sorted file goes; `None`: replace the input (atomically).
    pub output: Option<String>,
}

/// Steps of a sort, in the order they happen (for progress and for tests).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SortEvent {
    /// Every run's blocks are locked and every sub-operation submitted.
    Submitted { parts: usize },
    /// Member `member` sorted its part and unlocked its run.
    Sorted { member: u16, bytes: u64 },
    /// Member `into` began reading `from`'s run (its sort had unlocked it), in merge
    /// round `round` (the chain: run k in round k; the tree: round 0 loads each
    /// member's own run, round r >= 1 merges pairs in parallel).
    MergeRead {
        round: u32,
        from: u16,
        into: u16,
        bytes: u64,
    },
    /// Member `into` merged, holding `bytes` sorted.
    Merged { round: u32, into: u16, bytes: u64 },
    /// The output is committed.
    Committed { member: u16, bytes: u64 },
}

/// What a sort did.
#[derive(Clone, Debug, Serialize)]
pub struct SortReport {
    pub input: String,
    pub output: String,
    pub mode: SortMode,
    pub topology: Topology,
    pub bytes: u64,
    pub keys: u64,
    /// Members that held part of the input.
    pub parts: usize,
    /// The member holding the output.
    pub output_member: u16,
    /// Wall time of the sort phase (until the last part was sorted), the whole merge
    /// phase after it, and the whole operation.
    pub sort_wall_ns: u64,
    pub merge_wall_ns: u64,
    pub total_wall_ns: u64,
    /// Bytes each link carried during the sort.
    pub links: LinkCounters,
    pub events: Vec<SortEvent>,
}

/// `call csx_sort_u64; exit`: r1/r2 are window 0 at entry.
fn sort_program(id: u32) -> Vec<u8> {
    let mut p = vec![0x85, 0, 0, 0];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    p
}

/// `r3 = args->cparam1; call csx_merge_u64; exit`.
fn merge_program(id: u32) -> Vec<u8> {
    let mut p = vec![0x79, 0x53, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&[0x85, 0, 0, 0]);
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    p
}

/// The two programs loaded on one member.
struct Programs {
    sort: ProgramIndex,
    merge: ProgramIndex,
}

struct Part {
    member: u16,
    len: u64,
    /// The piece staged in device memory (freed by the sort).
    buf: MemHandle,
    /// The run file's blocks.
    ranges: Vec<BlockRange>,
}

/// Per-sort state shared by its threads.
struct Job<'a> {
    array: &'a Array,
    input: FileEntry,
    run_path: String,
    programs: Vec<Option<Programs>>,
    events: Mutex<Vec<SortEvent>>,
    on_event: &'a (dyn Fn(&SortEvent) + Sync),
}

impl Job<'_> {
    fn emit(&self, e: SortEvent) {
        (self.on_event)(&e);
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }

    fn dev(&self, m: u16) -> &Device {
        &self.array.members()[usize::from(m)].device
    }

    fn progs(&self, m: u16) -> &Programs {
        self.programs[usize::from(m)]
            .as_ref()
            .expect("programs are loaded on every member that sorts or merges")
    }

    fn alloc(&self, m: u16, len: u64) -> Result<MemHandle, ArrayError> {
        self.dev(m)
            .alloc(len.max(KEY_BYTES))
            .map_err(self.array.member_error(m, "memory-alloc"))
    }

    fn free(&self, m: u16, h: MemHandle) {
        let _ = self.dev(m).free(h);
    }

    fn run(&self, m: u16, req: ExecuteRequest, what: &str, keys: u64) -> Result<(), ArrayError> {
        // Our own programs, whose work grows with the data: they take the most time the
        // protocol allows, not the default meant for untrusted programs.
        let req = req.time_limit_ms(csx_proto::limits::TIME_LIMIT_MS_MAX);
        let ex = self
            .dev(m)
            .execute(&req)
            .map_err(self.array.member_error(m, "execute"))?;
        if ex.trapped() || ex.r0 != keys {
            return Err(ArrayError::Other(format!(
                "array member {m}: the {what} returned {} for {keys} keys (trap: {:?}, detail: {:?})",
                ex.r0_signed(),
                ex.trap,
                ex.detail
            )));
        }
        Ok(())
    }

    /// Sorts member `p.member`'s staged piece and writes it over its run file, in place;
    /// the guard unlocks the run on return, done or failed.
    fn sort_part(&self, p: &Part, guard: LockGuard) -> Result<(), ArrayError> {
        let m = p.member;
        let dev = self.dev(m);
        let result = (|| {
            self.run(
                m,
                ExecuteRequest::new(self.progs(m).sort).window(p.buf, 0, p.len),
                "sort",
                p.len / KEY_BYTES,
            )?;
            write_file(self.array, dev, m, &self.run_path, p.buf, p.len)
        })();
        self.free(m, p.buf);
        result?;
        // Reported before the unlock, so no merge read can be reported ahead of it.
        self.emit(SortEvent::Sorted {
            member: m,
            bytes: p.len,
        });
        drop(guard);
        Ok(())
    }

    /// Brings part `p`'s run into `dst` on member `into` at `at`: device to device
    /// (instant) or through the host (baseline). Waits for the run's lock either way.
    fn fetch_run(
        &self,
        p: &Part,
        into: u16,
        dst: MemHandle,
        at: u64,
        mode: SortMode,
        round: u32,
    ) -> Result<(), ArrayError> {
        self.array.locks().wait_unlocked(&p.ranges, None)?;
        self.emit(SortEvent::MergeRead {
            round,
            from: p.member,
            into,
            bytes: p.len,
        });
        if p.member == into || mode == SortMode::Instant {
            self.array.d2d_read_blocks(&p.ranges, into, dst, at)?;
            return Ok(());
        }
        // The baseline: the host reads the run, then writes it to the merging member.
        let mut done = 0;
        while done < p.len {
            let n = (p.len - done).min(csx_host::proto::limits::FILE_IO_SIZE_MAX);
            let bytes = self
                .dev(p.member)
                .read_file(&self.run_path, done, n)
                .map_err(self.array.member_error(p.member, "file-read"))?;
            self.dev(into)
                .write_mem(dst, at + done, &bytes)
                .map_err(self.array.member_error(into, "memory-write"))?;
            done += n;
        }
        self.array.links().host_copy(p.member, into, p.len);
        Ok(())
    }

    fn merge_in(
        &self,
        into: u16,
        buf: MemHandle,
        split: u64,
        len: u64,
        round: u32,
    ) -> Result<(), ArrayError> {
        self.run(
            into,
            ExecuteRequest::new(self.progs(into).merge)
                .window(buf, 0, len)
                .cparams(split, 0),
            "merge",
            len / KEY_BYTES,
        )?;
        self.emit(SortEvent::Merged {
            round,
            into,
            bytes: len,
        });
        Ok(())
    }

    /// The chain: `parts[0]`'s member merges every other run into its buffer in turn.
    fn chain(
        &self,
        parts: &[Part],
        total: u64,
        mode: SortMode,
    ) -> Result<(u16, MemHandle), ArrayError> {
        let t = parts[0].member;
        let buf = self.alloc(t, total)?;
        let result = (|| {
            let mut acc = 0;
            for (k, p) in parts.iter().enumerate() {
                self.fetch_run(p, t, buf, acc, mode, k as u32)?;
                if acc > 0 {
                    self.merge_in(t, buf, acc, acc + p.len, k as u32)?;
                }
                acc += p.len;
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.free(t, buf);
            return Err(e);
        }
        Ok((t, buf))
    }

    /// The tree: every member loads its own run, then pairs merge round by round.
    fn tree(&self, parts: &[Part], mode: SortMode) -> Result<(u16, MemHandle), ArrayError> {
        // (member, buffer, bytes)
        let mut runs: Vec<(u16, MemHandle, u64)> = Vec::new();
        let loaded: Vec<Result<(u16, MemHandle, u64), ArrayError>> = std::thread::scope(|s| {
            let hs: Vec<_> = parts
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        let buf = self.alloc(p.member, p.len)?;
                        match self.fetch_run(p, p.member, buf, 0, mode, 0) {
                            Ok(()) => Ok((p.member, buf, p.len)),
                            Err(e) => {
                                self.free(p.member, buf);
                                Err(e)
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("a run loader panicked"))
                .collect()
        });
        let mut first_err = None;
        for r in loaded {
            match r {
                Ok(run) => runs.push(run),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            for (m, b, _) in runs {
                self.free(m, b);
            }
            return Err(e);
        }
        let mut round = 0;
        while runs.len() > 1 {
            round += 1;
            let mut pairs = Vec::new();
            let mut it = runs.into_iter();
            let mut carry = None;
            loop {
                match (it.next(), it.next()) {
                    (Some(a), Some(b)) => pairs.push((a, b)),
                    (Some(a), None) => {
                        carry = Some(a);
                        break;
                    }
                    _ => break,
                }
            }
            let merged: Vec<Result<(u16, MemHandle, u64), ArrayError>> = std::thread::scope(|s| {
                let hs: Vec<_> = pairs
                    .iter()
                    .map(|&(a, b)| s.spawn(move || self.merge_pair(a, b, mode, round)))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("a merger panicked"))
                    .collect()
            });
            runs = Vec::new();
            for r in merged {
                match r {
                    Ok(run) => runs.push(run),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            runs.extend(carry);
            if let Some(e) = first_err {
                for (m, b, _) in runs {
                    self.free(m, b);
                }
                return Err(e);
            }
        }
        let (m, b, _) = runs[0];
        Ok((m, b))
    }

    /// Merges run `b` into a new buffer on `a`'s member; frees both inputs.
    fn merge_pair(
        &self,
        a: (u16, MemHandle, u64),
        b: (u16, MemHandle, u64),
        mode: SortMode,
        round: u32,
    ) -> Result<(u16, MemHandle, u64), ArrayError> {
        let (am, ab, alen) = a;
        let (bm, bb, blen) = b;
        let result = (|| {
            let buf = self.alloc(am, alen + blen)?;
            let r = (|| {
                self.dev(am)
                    .copy_to_mem(
                        buf,
                        0,
                        vec![CopySource::Mem {
                            handle: ab,
                            offset: 0,
                            len: alen,
                        }],
                    )
                    .map_err(self.array.member_error(am, "memory-copy"))?;
                self.emit(SortEvent::MergeRead {
                    round,
                    from: bm,
                    into: am,
                    bytes: blen,
                });
                if mode == SortMode::Instant || am == bm {
                    self.array.d2d_copy_mem(bm, bb, 0, blen, am, buf, alen)?;
                } else {
                    let mut done = 0;
                    while done < blen {
                        let n = (blen - done).min(csx_host::proto::limits::MEM_IO_SIZE_MAX);
                        let bytes = self
                            .dev(bm)
                            .read_mem(bb, done, n)
                            .map_err(self.array.member_error(bm, "memory-read"))?;
                        self.dev(am)
                            .write_mem(buf, alen + done, &bytes)
                            .map_err(self.array.member_error(am, "memory-write"))?;
                        done += n;
                    }
                    self.array.links().host_copy(bm, am, blen);
                }
                self.merge_in(am, buf, alen, alen + blen, round)
            })();
            match r {
                Ok(()) => Ok((am, buf, alen + blen)),
                Err(e) => {
                    self.free(am, buf);
                    Err(e)
                }
            }
        })();
        self.free(am, ab);
        self.free(bm, bb);
        result
    }
}

/// Memory Copy of `len` bytes of the member file `path` into `buf`, in chunks.
fn copy_file(
    array: &Array,
    dev: &Device,
    m: u16,
    path: &str,
    len: u64,
    buf: MemHandle,
) -> Result<(), ArrayError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        dev.copy_file_to_mem(path, done, n, buf, done)
            .map_err(array.member_error(m, "memory-copy"))?;
        done += n;
    }
    Ok(())
}

/// File Write From Memory of `len` bytes of `buf` into the member file `path`.
fn write_file(
    array: &Array,
    dev: &Device,
    m: u16,
    path: &str,
    buf: MemHandle,
    len: u64,
) -> Result<(), ArrayError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(WRITE_CHUNK);
        dev.write_mem_to_file(
            path,
            done,
            MemRange {
                handle: buf,
                offset: done,
                len: n,
            },
        )
        .map_err(array.member_error(m, "file-write-from-memory"))?;
        done += n;
    }
    Ok(())
}

fn function_id(array: &Array, m: u16, name: &str) -> Result<u32, ArrayError> {
    let fs = array.members()[usize::from(m)]
        .device
        .functions()
        .map_err(array.member_error(m, "list-functions"))?;
    fs.iter()
        .find(|f| f.name == name)
        .map(|f| f.id.0)
        .ok_or_else(|| {
            ArrayError::Other(format!(
                "array member {m} has no registered function {name} (a csx device older than this array?)"
            ))
        })
}

fn load_programs(array: &Array, m: u16) -> Result<Programs, ArrayError> {
    let dev = &array.members()[usize::from(m)].device;
    let engine = if dev
        .identify()
        .map_err(array.member_error(m, "identify"))?
        .jit
    {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    let load = |image: Vec<u8>| -> Result<ProgramIndex, ArrayError> {
        let pind = dev
            .load_program_any_slot(ProgramType::Raw, &image, None)
            .map_err(array.member_error(m, "load-program"))?;
        if let Err(e) = dev.activate(pind, engine) {
            let _ = dev.unload(pind);
            return Err(array.member_error(m, "activate-program")(e));
        }
        Ok(pind)
    };
    let sort = load(sort_program(function_id(array, m, "csx_sort_u64")?))?;
    match load(merge_program(function_id(array, m, "csx_merge_u64")?)) {
        Ok(merge) => Ok(Programs { sort, merge }),
        Err(e) => {
            let _ = dev.deactivate(sort);
            let _ = dev.unload(sort);
            Err(e)
        }
    }
}

fn unload_programs(array: &Array, m: u16, p: &Programs) {
    let dev = &array.members()[usize::from(m)].device;
    for pind in [p.sort, p.merge] {
        let _ = dev.deactivate(pind);
        let _ = dev.unload(pind);
    }
}

/// Sorts the array file `input` (little-endian u64 keys) per `options` (see the module
/// doc). `on_event` hears every step as it happens.
pub fn sort(
    array: &Array,
    input: &str,
    options: &SortOptions,
    on_event: &(dyn Fn(&SortEvent) + Sync),
) -> Result<SortReport, ArrayError> {
    let started = Instant::now();
    let input_path = normalize_path(input)?;
    let output_path = match &options.output {
        Some(o) => normalize_path(o)?,
        None => input_path.clone(),
    };
    let entry = array.stat(&input_path)?;
    if !entry.size_bytes.is_multiple_of(KEY_BYTES) {
        return Err(ArrayError::NotKeys {
            path: input_path,
            size: entry.size_bytes,
            width: KEY_BYTES,
        });
    }
    let before = array.links().snapshot();
    let job_id = array.reserve_id();
    let out_id = array.reserve_id();
    let parts_sizes: Vec<(u16, u64)> = piece_sizes(&entry)
        .into_iter()
        .filter(|&(_, len)| len > 0)
        .collect();
    if parts_sizes.is_empty() {
        // No keys: the output is an empty file, on the input's first member.
        let member = crate::array::layout_members(&entry.layout)[0];
        let dev = &array.members()[usize::from(member)].device;
        dev.put_bytes(&array.member_path(out_id), &[])
            .map_err(array.member_error(member, "file-write"))?;
        array.commit(
            &output_path,
            FileEntry {
                id: out_id,
                size_bytes: 0,
                layout: Layout::Single { member },
            },
        )?;
        let events = vec![SortEvent::Committed { member, bytes: 0 }];
        on_event(&events[0]);
        return Ok(SortReport {
            input: input_path,
            output: output_path,
            mode: options.mode,
            topology: options.topology,
            bytes: 0,
            keys: 0,
            parts: 0,
            output_member: member,
            sort_wall_ns: 0,
            merge_wall_ns: 0,
            total_wall_ns: started.elapsed().as_nanos() as u64,
            links: crate::link::LinkCounters {
                members: vec![Default::default(); array.members().len()],
                ..Default::default()
            },
            events,
        });
    }
    let mut job = Job {
        array,
        input: entry.clone(),
        run_path: format!("{}.run", array.member_path(job_id)),
        programs: (0..array.members().len()).map(|_| None).collect(),
        events: Mutex::new(Vec::new()),
        on_event,
    };
    let result = (|| {
        for &(m, _) in &parts_sizes {
            job.programs[usize::from(m)] = Some(load_programs(array, m)?);
        }
        run_sort(&job, &parts_sizes, options, out_id, started)
    })();
    // Cleanup, whatever happened: programs, run files; on failure the output piece.
    for (m, p) in job.programs.iter().enumerate() {
        if let Some(p) = p {
            unload_programs(array, m as u16, p);
        }
    }
    for &(m, _) in &parts_sizes {
        let _ = job.dev(m).delete_file(&job.run_path);
    }
    let (output_member, sort_done) = match result {
        Ok(r) => r,
        Err(e) => {
            for m in 0..array.members().len() as u16 {
                let _ = job.dev(m).delete_file(&array.member_path(out_id));
            }
            return Err(e);
        }
    };
    job.emit(SortEvent::Committed {
        member: output_member,
        bytes: entry.size_bytes,
    });
    let after = array.links().snapshot();
    let total = started.elapsed();
    let events = std::mem::take(job.events.get_mut().unwrap_or_else(|p| p.into_inner()));
    Ok(SortReport {
        input: input_path,
        output: output_path,
        mode: options.mode,
        topology: options.topology,
        bytes: entry.size_bytes,
        keys: entry.size_bytes / KEY_BYTES,
        parts: parts_sizes.len(),
        output_member,
        sort_wall_ns: sort_done.as_nanos() as u64,
        merge_wall_ns: total.saturating_sub(sort_done).as_nanos() as u64,
        total_wall_ns: total.as_nanos() as u64,
        links: diff(&after, &before),
        events,
    })
}

fn diff(a: &LinkCounters, b: &LinkCounters) -> LinkCounters {
    let d = |x: &crate::link::LinkBytes, y: &crate::link::LinkBytes| crate::link::LinkBytes {
        egress: x.egress - y.egress,
        ingress: x.ingress - y.ingress,
    };
    LinkCounters {
        host: d(&a.host, &b.host),
        members: a
            .members
            .iter()
            .zip(&b.members)
            .map(|(x, y)| d(x, y))
            .collect(),
        d2d_copies: a.d2d_copies - b.d2d_copies,
        d2d_bytes: a.d2d_bytes - b.d2d_bytes,
        host_copies: a.host_copies - b.host_copies,
        host_copy_bytes: a.host_copy_bytes - b.host_copy_bytes,
    }
}

/// The sorts and merges, submitted together; returns the output member and when the
/// last sort finished.
fn run_sort(
    job: &Job<'_>,
    sizes: &[(u16, u64)],
    options: &SortOptions,
    out_id: u64,
    started: Instant,
) -> Result<(u16, Duration), ArrayError> {
    let array = job.array;
    let total: u64 = sizes.iter().map(|&(_, l)| l).sum();
    // Before any sub-operation starts: each piece staged in its member's memory and
    // written to a run file there (which allocates the run's blocks), and the run's
    // blocks locked.
    let mut parts: Vec<Part> = Vec::new();
    let mut guards = Vec::new();
    let mut setup = || -> Result<(), ArrayError> {
        for &(m, len) in sizes {
            let dev = job.dev(m);
            let buf = job.alloc(m, len)?;
            parts.push(Part {
                member: m,
                len,
                buf,
                ranges: Vec::new(),
            });
            let piece = array.member_path(job.input.id);
            copy_file(array, dev, m, &piece, len, buf)?;
            dev.put_bytes(&job.run_path, &[])
                .map_err(array.member_error(m, "file-write"))?;
            write_file(array, dev, m, &job.run_path, buf, len)?;
            let ext = dev
                .extents(&job.run_path)
                .map_err(array.member_error(m, "file-extents"))?;
            let ranges = ext
                .extents
                .iter()
                .map(|e| {
                    Ok(BlockRange {
                        start: TaggedAddr::from_byte_offset(m, e.nvm_offset)?,
                        len: e.len,
                    })
                })
                .collect::<Result<Vec<_>, ArrayError>>()?;
            if ranges.iter().map(|r| r.len).sum::<u64>() != len || ext.truncated {
                return Err(ArrayError::Other(format!(
                    "array member {m}: the run file of {len} bytes maps {} bytes",
                    ranges.iter().map(|r| r.len).sum::<u64>()
                )));
            }
            guards.push(Some(array.locks().lock(
                &format!("sort on member {m}"),
                &ranges,
                None,
            )?));
            parts.last_mut().expect("pushed").ranges = ranges;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        for p in &parts {
            job.free(p.member, p.buf);
        }
        return Err(e);
    }
    job.emit(SortEvent::Submitted { parts: parts.len() });
    let sort_done = Mutex::new(Duration::ZERO);
    let (sorts, merged) = std::thread::scope(|s| {
        let sorters: Vec<_> = parts
            .iter()
            .zip(guards.iter_mut())
            .map(|(p, g)| {
                let guard = g.take().expect("one guard per part");
                let sort_done = &sort_done;
                s.spawn(move || {
                    let r = job.sort_part(p, guard);
                    let mut d = sort_done.lock().unwrap_or_else(|e| e.into_inner());
                    *d = (*d).max(started.elapsed());
                    r
                })
            })
            .collect();
        let merger = s.spawn(|| match options.topology {
            Topology::Chain => job.chain(&parts, total, options.mode),
            Topology::Tree => job.tree(&parts, options.mode),
        });
        let sorts: Vec<Result<(), ArrayError>> = sorters
            .into_iter()
            .map(|h| h.join().expect("a sorter panicked"))
            .collect();
        (sorts, merger.join().expect("the merger panicked"))
    });
    // A failed sort unlocked its run without writing it, so the merge may have read
    // garbage: the sort's error wins.
    for r in sorts {
        r?;
    }
    let (t, buf) = merged?;
    let out_path = array.member_path(out_id);
    let written = (|| {
        let dev = job.dev(t);
        dev.put_bytes(&out_path, &[])
            .map_err(array.member_error(t, "file-write"))?;
        write_file(array, dev, t, &out_path, buf, total)?;
        dev.flush().map_err(array.member_error(t, "flush"))
    })();
    job.free(t, buf);
    written?;
    let output = options
        .output
        .clone()
        .unwrap_or_else(|| job_input_path(job));
    array.commit(
        &normalize_path(&output)?,
        FileEntry {
            id: out_id,
            size_bytes: total,
            layout: Layout::Single { member: t },
        },
    )?;
    let d = *sort_done.lock().unwrap_or_else(|e| e.into_inner());
    Ok((t, d))
}

fn job_input_path(job: &Job<'_>) -> String {
    job.array
        .list("/")
        .into_iter()
        .find(|(_, e)| e.id == job.input.id)
        .map(|(p, _)| p)
        .unwrap_or_default()
}
