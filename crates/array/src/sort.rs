//! Distributed merge sort over an array (INSTANT's merge sort, thesis §4.1-4.2), of
//! little-endian u64 keys.
//!
//! 1. Every member holding part of the input stages its piece into its device memory
//!    (a Memory Copy), in a buffer as large as the merges will grow it, and locks the
//!    piece's blocks. It sorts the piece there, in place, by an Execute of a
//!    two-instruction program calling the registered function `csx_sort_u64`, and
//!    unlocks the blocks when its run is ready.
//! 2. The merges are submitted at the same time and wait on those locks (COSTA's
//!    ordering): a merge reads a run only once its sort has unlocked it.
//!    * `Instant` + `Chain` (the thesis's topology, inferred for N > 2): the first
//!      member merges every other member's run into its own in turn, each run moved
//!      device to device, memory to memory.
//!    * `Instant` + `Tree`: pairs of members merge in parallel rounds (log2 N rounds),
//!      the second run of a pair moved device to device behind the first. Our
//!      improvement.
//!    * `Host` (Intel OAS, the thesis's baseline): the same sorts, then each run is read
//!      by the host and written to the merging member (the host link twice), then
//!      merged there.
//!
//!    Merges run `csx_merge_u64` on the merging member, in its buffer. The final merge
//!    (the chain's last, the tree's last round) is split over the member's engines
//!    (merge path): the output is cut into equal slices at co-ranks found by a binary
//!    search over the two runs, and each slice is one Execute of `csx_merge_into_u64`
//!    from disjoint windows into a fresh buffer, all slices at once. With one engine, no
//!    memory for the second buffer, or small runs, it merges in place as the others.
//! 3. The result is written to a fresh member file and named by the catalog only on
//!    success (the atomic "rename"): a failure leaves the input and any old output as
//!    they were and releases every lock and buffer.
//!
//! Runs move device to device by device memory, except between two daemons (tcp
//! members), whose memory belongs to this client's connection: there the source member
//! writes the run to a run file on its own storage and the destination daemon pulls its
//! blocks from the source daemon (`Array::d2d_read_blocks`), so the host link carries
//! commands only.
//!
//! The thesis's runs go to disk between sort and merge because its data outgrow device
//! memory; ours are kept in device memory, so the bytes are read from storage once (the
//! staging), moved once per merge that needs them, and written once (the output).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_ebpf::emit::{Emitter, R3, R4, R5};
use csx_ebpf::isa::{ALU_ADD, ALU_MOV, SIZE_DW};
use csx_host::proto::{EngineKind, MemHandle, MemRange, ProgramIndex, ProgramType};
use csx_host::session::Session;
use csx_host::{Device, ExecuteRequest};
use csx_proto::abi::args;
use serde::Serialize;

use crate::array::{piece_sizes, Array};
use crate::d2d::{MemAt, Route};
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
    /// One multiway pass, spread over the members: the output is cut into one equal
    /// slice per member holding a run, and each of those members merges its slice from
    /// every run at once (`csx_merge_runs_u64`), writing it to its own piece of the
    /// output (striped, one stripe per member) while it merges the next chunk.
    Multiway,
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
    /// The member holding the output (the first, when it is striped).
    pub output_member: u16,
    /// How the output is laid out: on one member (chain, tree), or one stripe per
    /// member that held a run (multiway).
    pub output_layout: Layout,
    /// Wall time of the sort phase (until the last part was sorted), the whole merge
    /// phase after it, and the whole operation.
    pub sort_wall_ns: u64,
    pub merge_wall_ns: u64,
    pub total_wall_ns: u64,
    /// Of the merge phase, the time writing the output to its member and flushing it.
    pub output_wall_ns: u64,
    /// Slices the final merge was split into over the output member's engines (1: it
    /// ran in place on one engine; 0: no merge).
    pub final_merge_slices: u32,
    /// Bytes each link carried during the sort.
    pub links: LinkCounters,
    pub events: Vec<SortEvent>,
}

/// The argument block's fields the sort's programs read (the device passes it in r5).
const CPARAM1: i16 = args::CPARAM1_OFFSET as i16;
/// `args->windows[i].addr` and `.len`.
const fn window_addr(i: usize) -> i16 {
    (args::WINDOWS_OFFSET + i * args::WINDOW_SIZE) as i16
}
const fn window_len(i: usize) -> i16 {
    window_addr(i) + 8
}

/// `call <id>; exit` after `prologue`, as a raw image.
fn call_program(id: u32, prologue: impl FnOnce(&mut Emitter<()>)) -> Result<Vec<u8>, ArrayError> {
    let mut e = Emitter::new();
    prologue(&mut e);
    e.call(id as i32);
    e.exit();
    e.finish()
        .map_err(|err| ArrayError::Other(format!("the sort's program for function {id}: {err}")))
}

/// `call csx_sort_u64; exit`: r1/r2 are window 0 at entry.
fn sort_program(id: u32) -> Result<Vec<u8>, ArrayError> {
    call_program(id, |_| {})
}

/// `r3 = args->cparam1; call csx_merge_u64; exit`.
fn merge_program(id: u32) -> Result<Vec<u8>, ArrayError> {
    call_program(id, |e| e.ldx(SIZE_DW, R3, R5, CPARAM1))
}

/// `r3 = &args->windows[2]; r4 = args->cparam1; r5 = args->windows[1].addr;
/// call csx_merge_runs_u64; exit`: the runs in windows 2.. (cparam1 of them) merge into
/// window 0 (r1/r2 at entry), the keys taken from each go to window 1.
fn merge_runs_program(id: u32) -> Result<Vec<u8>, ArrayError> {
    call_program(id, |e| {
        e.alu_x(ALU_MOV, R3, R5);
        e.alu_k(ALU_ADD, R3, i32::from(window_addr(2)));
        e.ldx(SIZE_DW, R4, R5, CPARAM1);
        e.ldx(SIZE_DW, R5, R5, window_addr(1));
    })
}

/// `r3 = args->windows[1].addr; r4 = args->windows[1].len; r5 = args->windows[2].addr;
/// call csx_merge_into_u64; exit`: window 0 and window 1 merge into window 2.
fn merge_into_program(id: u32) -> Result<Vec<u8>, ArrayError> {
    call_program(id, |e| {
        e.ldx(SIZE_DW, R3, R5, window_addr(1));
        e.ldx(SIZE_DW, R4, R5, window_len(1));
        e.ldx(SIZE_DW, R5, R5, window_addr(2));
    })
}

/// The programs loaded on one member, and its engines.
struct Programs {
    sort: ProgramIndex,
    merge: ProgramIndex,
    /// The split final merge's slice program (`None` on a device without
    /// `csx_merge_into_u64`: its final merge runs in place, on one engine).
    merge_into: Option<ProgramIndex>,
    /// The multiway merge (`None` on a device without `csx_merge_runs_u64`).
    merge_runs: Option<ProgramIndex>,
    engines: u32,
}

/// Smallest final merge split over engines: below it one engine is as fast.
pub const SPLIT_MIN_BYTES: u64 = 4 << 20;

/// Most slices a final merge is split into.
const SLICES_MAX: u32 = 16;

/// Most runs a multiway merge reads: an execution's windows less the output and the
/// keys-taken table.
pub const MULTIWAY_RUNS_MAX: u64 = csx_proto::limits::WINDOWS_MAX as u64 - 2;

/// Bytes a multiway merge produces per Execute (one output buffer of two): large
/// enough that a chunk's commands are small next to its work, small enough that the
/// last chunk's write (not overlapped) is short.
const MULTIWAY_CHUNK: u64 = 16 << 20;

fn writer_gone() -> ArrayError {
    ArrayError::Other("the output writer stopped".into())
}

/// One member's part of the input.
struct Part {
    member: u16,
    len: u64,
    /// The piece staged in device memory, sorted there in place, and grown into by the
    /// merges this member does: `hold` bytes, the most it ever holds.
    buf: MemHandle,
    /// The blocks of the member's input piece: locked by its sort until its run is
    /// ready in `buf`.
    ranges: Vec<BlockRange>,
}

impl Part {
    /// Byte `offset` of the part's buffer.
    fn at(&self, offset: u64) -> MemAt {
        MemAt {
            member: self.member,
            handle: self.buf,
            offset,
        }
    }
}

/// Bytes each part's buffer must hold: its own part, plus every run the topology merges
/// into it.
fn holds(lens: &[u64], topology: Topology) -> Vec<u64> {
    let mut hold = lens.to_vec();
    match topology {
        // Each run stays in its own buffer; merges read it from there.
        Topology::Multiway => {}
        Topology::Chain => hold[0] = lens.iter().sum(),
        Topology::Tree => {
            // (part index, bytes) per run, paired as `Job::tree` pairs them.
            let mut runs: Vec<(usize, u64)> = lens.iter().copied().enumerate().collect();
            while runs.len() > 1 {
                runs = runs
                    .chunks(2)
                    .map(|c| match *c {
                        [(a, alen), (_, blen)] => {
                            hold[a] = hold[a].max(alen + blen);
                            (a, alen + blen)
                        }
                        [one] => one,
                        _ => unreachable!("chunks of one or two"),
                    })
                    .collect();
            }
        }
    }
    hold
}

/// One member's session (the programs the sort loaded there and the device memory it
/// allocated, released when the sort ends, whatever happened) and those programs.
struct MemberWork<'a> {
    session: Mutex<Session<'a>>,
    programs: Programs,
}

/// Two sorted runs side by side in one member's buffer: keys `[0, split)` and
/// `[split, len)` (bytes).
#[derive(Clone, Copy, Debug)]
struct RunPair {
    member: u16,
    buf: MemHandle,
    split: u64,
    len: u64,
}

/// The chunk loop of one multiway slice: what it merges with and into.
struct SliceMerge<'p> {
    member: u16,
    prog: ProgramIndex,
    /// The two output buffers merged into in turn.
    outs: [MemHandle; 2],
    /// Bytes merged per Execute.
    chunk: u64,
    /// The keys-taken table (one u64 per run).
    taken: MemHandle,
    /// Keys of the slice.
    total: u64,
    out_path: &'p str,
}

/// Per-sort state shared by its threads.
struct Job<'a> {
    array: &'a Array,
    input: FileEntry,
    members: Vec<Option<MemberWork<'a>>>,
    events: Mutex<Vec<SortEvent>>,
    on_event: &'a (dyn Fn(&SortEvent) + Sync),
    /// Set by a sort that failed: merges stop at their next wait (the sort's error is
    /// the one reported).
    failed: AtomicBool,
    /// Nanoseconds spent writing and flushing the output.
    output_ns: AtomicU64,
    /// The buffer a split final merge wrote the result to (on the output member).
    final_out: Mutex<Option<MemHandle>>,
    /// See [`SortReport::final_merge_slices`].
    final_slices: std::sync::atomic::AtomicU32,
    /// Member path prefix of the run files a move between daemons writes.
    run_prefix: String,
}

impl<'a> Job<'a> {
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

    fn work(&self, m: u16) -> &MemberWork<'a> {
        self.members[usize::from(m)]
            .as_ref()
            .expect("a session is open on every member that sorts or merges")
    }

    fn progs(&self, m: u16) -> &Programs {
        &self.work(m).programs
    }

    /// Member `m`'s session (held for one step: a merge's threads on other members
    /// use their own).
    fn session(&self, m: u16) -> MutexGuard<'_, Session<'a>> {
        self.work(m)
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Device memory on member `m`, released with its session.
    fn alloc(&self, m: u16, len: u64) -> Result<MemHandle, ArrayError> {
        self.session(m)
            .alloc(len.max(KEY_BYTES))
            .map_err(self.array.session_error(m))
    }

    /// Runs `req` on member `m`, which must return `keys` (the keys it sorted or merged).
    fn run(&self, m: u16, req: ExecuteRequest, what: &str, keys: u64) -> Result<(), ArrayError> {
        self.run_all(m, vec![req], what, &[keys])
    }

    /// Runs `reqs` at once on member `m`'s engines; run i must return `keys[i]`.
    fn run_all(
        &self,
        m: u16,
        reqs: Vec<ExecuteRequest>,
        what: &str,
        keys: &[u64],
    ) -> Result<(), ArrayError> {
        // Our own programs, whose work grows with the data: they take the most time the
        // protocol allows, not the default meant for untrusted programs.
        let reqs: Vec<ExecuteRequest> = reqs
            .into_iter()
            .map(|r| r.time_limit_ms(csx_proto::limits::TIME_LIMIT_MS_MAX))
            .collect();
        let done = self
            .session(m)
            .execute_all(&reqs)
            .map_err(self.array.session_error(m))?;
        for (ex, &keys) in done.iter().zip(keys) {
            if ex.r0 != keys {
                return Err(ArrayError::Other(format!(
                    "array member {m}: the {what} returned {} for {keys} keys (detail: {:?})",
                    ex.r0_signed(),
                    ex.detail
                )));
            }
        }
        Ok(())
    }

    /// Stages member `p.member`'s piece into its buffer and sorts it there, in place;
    /// the guard unlocks the piece's blocks on return, done or failed.
    fn sort_part(&self, p: &Part, guard: LockGuard) -> Result<(), ArrayError> {
        let m = p.member;
        let piece = self.array.member_path(self.input.id);
        let r = self.copy_file(m, &piece, p.len, p.buf).and_then(|()| {
            self.run(
                m,
                ExecuteRequest::new(self.progs(m).sort).window(p.buf, 0, p.len),
                "sort",
                p.len / KEY_BYTES,
            )
        });
        if r.is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
        r?;
        // Reported before the unlock, so no merge read can be reported ahead of it.
        self.emit(SortEvent::Sorted {
            member: m,
            bytes: p.len,
        });
        drop(guard);
        Ok(())
    }

    /// Waits until part `p`'s sort unlocked it (its run is ready in its buffer).
    fn wait_sorted(&self, p: &Part) -> Result<(), ArrayError> {
        self.array.locks().wait_unlocked(&p.ranges, None)?;
        if self.failed.load(Ordering::SeqCst) {
            return Err(ArrayError::Other("a member's sort failed".into()));
        }
        Ok(())
    }

    /// Moves `len` bytes of a run from `src` to `dst` (on another member, or the same):
    /// device to device (instant) or through the host (the baseline).
    fn move_run(&self, src: MemAt, dst: MemAt, len: u64, mode: SortMode) -> Result<(), ArrayError> {
        let (from, into) = (src.member, dst.member);
        if mode == SortMode::Instant && self.array.block_route(from, into) == Route::Peer {
            return self.move_run_peer(src, dst, len);
        }
        if mode == SortMode::Instant || from == into {
            // A large run moves as two halves at once (two copies on the link): one
            // stream of commands leaves a core idle.
            let half = if len >= 2 * SPLIT_MIN_BYTES {
                (len / 2).next_multiple_of(KEY_BYTES)
            } else {
                len
            };
            let pieces = [(0, half), (half, len - half)];
            let results: Vec<Result<(), ArrayError>> = std::thread::scope(|s| {
                let hs: Vec<_> = pieces
                    .iter()
                    .filter(|&&(_, n)| n > 0)
                    .map(|&(off, n)| {
                        s.spawn(move || {
                            self.array
                                .d2d_copy_mem(src.plus(off), dst.plus(off), n)
                                .map(|_| ())
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("a run mover panicked"))
                    .collect()
            });
            return results.into_iter().collect();
        }
        // The baseline: the host reads the run, then writes it to the merging member.
        let mut done = 0;
        while done < len {
            let n = (len - done).min(csx_host::proto::limits::MEM_IO_SIZE_MAX);
            let bytes = self
                .dev(from)
                .read_mem(src.handle, src.offset + done, n)
                .map_err(self.array.member_error(from, "memory-read"))?;
            self.dev(into)
                .write_mem(dst.handle, dst.offset + done, &bytes)
                .map_err(self.array.member_error(into, "memory-write"))?;
            done += n;
        }
        self.array.links().host_copy(from, into, len);
        Ok(())
    }

    /// A run between two daemons: the source member writes it from its memory to a
    /// run file on its own storage, then the destination daemon pulls the file's blocks
    /// from the source daemon (`Array::d2d_read_blocks`, one D2D crossing; the host link
    /// carries commands only). The run file is deleted afterwards, done or failed; one
    /// left by a crash is an orphan under the array's prefix (`Array::orphans`).
    fn move_run_peer(&self, src: MemAt, dst: MemAt, len: u64) -> Result<(), ArrayError> {
        let (from, into) = (src.member, dst.member);
        // One file per move: a multiway merge moves ranges of one run to several
        // members at once.
        let path = format!("{}.run{from}.{into}.{}", self.run_prefix, src.offset);
        let dev = self.dev(from);
        let r = (|| {
            dev.put_bytes(&path, &[])
                .map_err(self.array.member_error(from, "file-write"))?;
            self.write_mem_range(src, len, &path, 0)?;
            let ranges = self.run_file_blocks(from, &path, len)?;
            self.array
                .d2d_read_blocks(&ranges, into, dst.handle, dst.offset)?;
            Ok(())
        })();
        let _ = dev.delete_file(&path);
        r
    }

    /// The blocks of the first `len` bytes of member `m`'s run file `path`, which must
    /// map them contiguously from its start.
    fn run_file_blocks(&self, m: u16, path: &str, len: u64) -> Result<Vec<BlockRange>, ArrayError> {
        let ext = self
            .dev(m)
            .extents(path)
            .map_err(self.array.member_error(m, "file-extents"))?;
        let mut extents = ext.extents;
        extents.sort_by_key(|e| e.file_offset);
        let mut ranges = Vec::new();
        let mut mapped = 0;
        for e in &extents {
            if e.file_offset != mapped {
                break;
            }
            let n = e.len.min(len - mapped);
            ranges.push(BlockRange {
                start: TaggedAddr::from_byte_offset(m, e.nvm_offset)?,
                len: n,
            });
            mapped += n;
            if mapped == len {
                break;
            }
        }
        if mapped != len || (ext.truncated && mapped < len) {
            return Err(ArrayError::Other(format!(
                "array member {m}: the run file of {len} bytes maps {mapped} contiguous bytes"
            )));
        }
        Ok(ranges)
    }

    /// Merges the two runs of `runs` in place (merge round `round`).
    fn merge_in(&self, runs: RunPair, round: u32) -> Result<(), ArrayError> {
        self.run(
            runs.member,
            ExecuteRequest::new(self.progs(runs.member).merge)
                .window(runs.buf, 0, runs.len)
                .cparams(runs.split, 0),
            "merge",
            runs.len / KEY_BYTES,
        )?;
        self.emit(SortEvent::Merged {
            round,
            into: runs.member,
            bytes: runs.len,
        });
        Ok(())
    }

    /// The chain: `parts[0]`'s member merges every other run into its buffer in turn.
    fn chain(&self, parts: &[Part], mode: SortMode) -> Result<(), ArrayError> {
        let t = parts[0].member;
        let buf = parts[0].buf;
        let mut acc = 0;
        for (k, p) in parts.iter().enumerate() {
            self.wait_sorted(p)?;
            self.emit(SortEvent::MergeRead {
                round: k as u32,
                from: p.member,
                into: t,
                bytes: p.len,
            });
            if k > 0 {
                self.move_run(p.at(0), parts[0].at(acc), p.len, mode)?;
                let runs = RunPair {
                    member: t,
                    buf,
                    split: acc,
                    len: acc + p.len,
                };
                if k + 1 == parts.len() {
                    self.merge_last(runs, k as u32)?;
                } else {
                    self.merge_in(runs, k as u32)?;
                }
            }
            acc += p.len;
        }
        Ok(())
    }

    /// The tree: every member's run stays where it was sorted (round 0), then pairs
    /// merge round by round, the second run of a pair moved into the first's buffer.
    /// Returns the index of the part whose buffer holds the result.
    fn tree(&self, parts: &[Part], mode: SortMode) -> Result<usize, ArrayError> {
        // (part index, bytes)
        let mut runs: Vec<(usize, u64)> = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            self.wait_sorted(p)?;
            self.emit(SortEvent::MergeRead {
                round: 0,
                from: p.member,
                into: p.member,
                bytes: p.len,
            });
            runs.push((i, p.len));
        }
        let mut round = 0;
        while runs.len() > 1 {
            round += 1;
            let merged: Vec<Result<(usize, u64), ArrayError>> = std::thread::scope(|s| {
                let hs: Vec<_> = runs
                    .chunks(2)
                    .map(|c| {
                        let c = c.to_vec();
                        let last = runs.len() == 2;
                        s.spawn(move || match *c {
                            [a, b] => self.merge_pair(parts, [a, b], mode, round, last),
                            [one] => Ok(one),
                            _ => unreachable!("chunks of one or two"),
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("a merger panicked"))
                    .collect()
            });
            runs = merged.into_iter().collect::<Result<_, _>>()?;
        }
        Ok(runs[0].0)
    }

    /// Merges run `b` into `a`'s buffer, behind `a`'s run (each a part index and the
    /// bytes of its run).
    fn merge_pair(
        &self,
        parts: &[Part],
        [a, b]: [(usize, u64); 2],
        mode: SortMode,
        round: u32,
        last: bool,
    ) -> Result<(usize, u64), ArrayError> {
        let (pa, pb) = (&parts[a.0], &parts[b.0]);
        self.emit(SortEvent::MergeRead {
            round,
            from: pb.member,
            into: pa.member,
            bytes: b.1,
        });
        self.move_run(pb.at(0), pa.at(a.1), b.1, mode)?;
        let runs = RunPair {
            member: pa.member,
            buf: pa.buf,
            split: a.1,
            len: a.1 + b.1,
        };
        if last {
            self.merge_last(runs, round)?;
        } else {
            self.merge_in(runs, round)?;
        }
        Ok((a.0, a.1 + b.1))
    }

    /// The final merge: split over the member's engines into a fresh buffer (the
    /// result's buffer is then `final_out`), or in place on one engine when the member
    /// has one engine, no `csx_merge_into_u64`, no memory for a second buffer, or the
    /// runs are small.
    fn merge_last(&self, runs: RunPair, round: u32) -> Result<(), ArrayError> {
        let progs = self.progs(runs.member);
        let slices = progs.engines.min(SLICES_MAX);
        let (Some(prog), true) = (progs.merge_into, slices >= 2 && runs.len >= SPLIT_MIN_BYTES)
        else {
            return self.merge_in(runs, round);
        };
        if runs.split == 0 || runs.split == runs.len {
            return self.merge_in(runs, round);
        }
        // (The session's lock is released before the fallback takes it again.)
        let out = self.session(runs.member).alloc(runs.len);
        let Ok(out) = out else {
            // No room for a second buffer: in place.
            return self.merge_in(runs, round);
        };
        self.final_slices.store(slices, Ordering::Relaxed);
        self.merge_split(runs, prog, out, slices)?;
        *self.final_out.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
        self.emit(SortEvent::Merged {
            round,
            into: runs.member,
            bytes: runs.len,
        });
        Ok(())
    }

    /// Merge path: the output cut into `slices` equal pieces at co-ranks (the keys of
    /// each run that go before the cut), each piece merged by its own Execute of `prog`
    /// from disjoint windows into `out`, all at once (the member's engines run them in
    /// parallel). A piece with keys of one run only is a copy inside the member, made
    /// while the others merge.
    fn merge_split(
        &self,
        runs: RunPair,
        prog: ProgramIndex,
        out: MemHandle,
        slices: u32,
    ) -> Result<(), ArrayError> {
        let (na, nb) = (runs.split / KEY_BYTES, (runs.len - runs.split) / KEY_BYTES);
        let p = u64::from(slices);
        let mut cuts = vec![(0u64, 0u64)];
        for s in 1..p {
            cuts.push(self.co_rank(runs, na, nb, (na + nb) * s / p)?);
        }
        cuts.push((na, nb));
        let (mut reqs, mut keys, mut copies) = (Vec::new(), Vec::new(), Vec::new());
        for w in cuts.windows(2) {
            let (from, to) = (w[0], w[1]);
            let (a_off, alen) = (from.0 * KEY_BYTES, (to.0 - from.0) * KEY_BYTES);
            let (b_off, blen) = (runs.split + from.1 * KEY_BYTES, (to.1 - from.1) * KEY_BYTES);
            let at = (from.0 + from.1) * KEY_BYTES;
            match (alen, blen) {
                (0, n) => copies.push((b_off, at, n)),
                (n, 0) => copies.push((a_off, at, n)),
                _ => {
                    reqs.push(
                        ExecuteRequest::new(prog)
                            .window(runs.buf, a_off, alen)
                            .window(runs.buf, b_off, blen)
                            .window(out, at, alen + blen),
                    );
                    keys.push((alen + blen) / KEY_BYTES);
                }
            }
        }
        std::thread::scope(|s| {
            let copier = s.spawn(|| {
                let place = |handle, offset| MemAt {
                    member: runs.member,
                    handle,
                    offset,
                };
                copies.iter().try_for_each(|&(src, at, n)| {
                    self.copy_in_member(place(runs.buf, src), place(out, at), n)
                })
            });
            let merged = self.run_all(runs.member, reqs, "merge slice", &keys);
            let copied = copier.join().expect("a slice copier panicked");
            merged.and(copied)
        })
    }

    /// `n` bytes from `src` to `dst` on the same member, in chunks.
    fn copy_in_member(&self, src: MemAt, dst: MemAt, n: u64) -> Result<(), ArrayError> {
        let m = dst.member;
        let mut done = 0;
        while done < n {
            let c = (n - done).min(CHUNK);
            self.dev(m)
                .copy_to_mem(
                    dst.handle,
                    dst.offset + done,
                    vec![csx_host::proto::CopySource::Mem {
                        handle: src.handle,
                        offset: src.offset + done,
                        len: c,
                    }],
                )
                .map_err(self.array.member_error(m, "memory-copy"))?;
            done += c;
        }
        Ok(())
    }
    /// The multiway merge (see [`Topology::Multiway`]): once every run is sorted, the
    /// output is cut into one slice per part at co-ranks over all runs, and every
    /// part's member merges its slice at once; returns the output's layout.
    fn multiway(
        &self,
        parts: &[Part],
        mode: SortMode,
        out_path: &str,
        total: u64,
    ) -> Result<Layout, ArrayError> {
        for p in parts {
            self.wait_sorted(p)?;
        }
        let p = parts.len() as u64;
        if p > MULTIWAY_RUNS_MAX {
            return Err(ArrayError::OutOfRange {
                what: "runs of a multiway merge (members holding the input)",
                value: p,
                min: 1,
                max: MULTIWAY_RUNS_MAX,
            });
        }
        let keys: Vec<u64> = parts.iter().map(|x| x.len / KEY_BYTES).collect();
        let total_keys = total / KEY_BYTES;
        // One stripe per member: member k's piece is output keys [k * s, (k + 1) * s).
        let stripe_keys = total_keys.div_ceil(p).max(1);
        let mut cuts = vec![vec![0u64; parts.len()]];
        for k in 1..p {
            let b = (k * stripe_keys).min(total_keys);
            cuts.push(self.kway_corank(parts, &keys, b)?);
        }
        cuts.push(keys.clone());
        let results: Vec<Result<u64, ArrayError>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..parts.len())
                .map(|k| {
                    let (from, to) = (&cuts[k], &cuts[k + 1]);
                    s.spawn(move || self.multiway_slice(parts, k, [from, to], mode, out_path))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("a slice merger panicked"))
                .collect()
        });
        let mut write_ns = 0;
        for r in results {
            write_ns = r?.max(write_ns);
        }
        self.output_ns.store(write_ns, Ordering::Relaxed);
        if parts.len() == 1 {
            return Ok(Layout::Single {
                member: parts[0].member,
            });
        }
        Ok(Layout::Striped {
            stripe_bytes: stripe_keys * KEY_BYTES,
            members: parts.iter().map(|x| x.member).collect(),
        })
    }

    /// Keys of run `p` that are at most `v`, knowing the count lies in `lo..=hi`: a
    /// binary search, one key read per step.
    fn count_le(&self, p: &Part, v: u64, mut lo: u64, mut hi: u64) -> Result<u64, ArrayError> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key_at(p.member, p.buf, mid * KEY_BYTES)? <= v {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The co-ranks of output key `b` over all runs: how many keys of each run go
    /// before it, ties taken from the lower run first (as `csx_merge_runs_u64` takes
    /// them). A binary search over key values for the smallest `v` with at least `b`
    /// keys at most `v`; each run's count is bracketed by its counts at the search's
    /// bounds, so the brackets shrink with it.
    fn kway_corank(&self, parts: &[Part], keys: &[u64], b: u64) -> Result<Vec<u64>, ArrayError> {
        // below[i]: keys of run i < lo; upto[i]: keys of run i <= hi.
        let (mut lo, mut hi) = (0u64, u64::MAX);
        let mut below = vec![0u64; parts.len()];
        let mut upto = keys.to_vec();
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut at = Vec::with_capacity(parts.len());
            for (i, p) in parts.iter().enumerate() {
                at.push(self.count_le(p, mid, below[i], upto[i])?);
            }
            if at.iter().sum::<u64>() >= b {
                hi = mid;
                upto = at;
            } else {
                lo = mid + 1;
                below = at;
            }
        }
        // Every key < lo goes before the cut; of the keys equal to lo, the lower runs'.
        let mut need = b - below.iter().sum::<u64>();
        Ok(below
            .iter()
            .zip(&upto)
            .map(|(&less, &le)| {
                let take = (le - less).min(need);
                need -= take;
                less + take
            })
            .collect())
    }

    /// Member `parts[k]`'s slice of a multiway merge: keys `from[i]..to[i]` of every
    /// run i. The other runs' ranges move to a buffer on the member (device to device,
    /// or through the host for the baseline); its own range is read in place. The slice
    /// is merged a chunk at a time into two buffers in turn, each chunk written to the
    /// member's piece of the output while the next one merges. Returns the time the
    /// writes took.
    fn multiway_slice(
        &self,
        parts: &[Part],
        k: usize,
        [from, to]: [&[u64]; 2],
        mode: SortMode,
        out_path: &str,
    ) -> Result<u64, ArrayError> {
        let m = parts[k].member;
        let dev = self.dev(m);
        dev.put_bytes(out_path, &[])
            .map_err(self.array.member_error(m, "file-write"))?;
        let slice_keys: u64 = from.iter().zip(to).map(|(a, b)| b - a).sum();
        if slice_keys == 0 {
            return Ok(0);
        }
        let Some(prog) = self.progs(m).merge_runs else {
            return Err(ArrayError::Other(format!(
                "array member {m} has no registered function csx_merge_runs_u64 (a csx device older than this array?)"
            )));
        };
        let mut runs = self.gather_runs(parts, k, [from, to], mode)?;
        let chunk = (slice_keys * KEY_BYTES).min(MULTIWAY_CHUNK);
        let slice = SliceMerge {
            member: m,
            prog,
            outs: [self.alloc(m, chunk)?, self.alloc(m, chunk)?],
            chunk,
            taken: self.alloc(m, KEY_BYTES * parts.len() as u64)?,
            total: slice_keys,
            out_path,
        };
        let write_ns = self.merge_chunks(&slice, &mut runs)?;
        dev.flush().map_err(self.array.member_error(m, "flush"))?;
        self.emit(SortEvent::Merged {
            round: 1,
            into: m,
            bytes: slice_keys * KEY_BYTES,
        });
        Ok(write_ns)
    }

    /// Each run's range of member `parts[k]`'s multiway slice, on that member: its own
    /// in place, the others' moved into one buffer there. Returns (buffer, offset,
    /// keys) per run with keys in the slice (its own always).
    fn gather_runs(
        &self,
        parts: &[Part],
        k: usize,
        [from, to]: [&[u64]; 2],
        mode: SortMode,
    ) -> Result<Vec<(MemHandle, u64, u64)>, ArrayError> {
        let m = parts[k].member;
        let recv_len: u64 = (0..parts.len())
            .filter(|&i| i != k)
            .map(|i| (to[i] - from[i]) * KEY_BYTES)
            .sum();
        let recv = if recv_len > 0 {
            Some(self.alloc(m, recv_len)?)
        } else {
            None
        };
        let mut runs = Vec::with_capacity(parts.len());
        let mut at = 0;
        for (i, p) in parts.iter().enumerate() {
            let n = to[i] - from[i];
            if i == k {
                runs.push((p.buf, from[i] * KEY_BYTES, n));
                continue;
            }
            self.emit(SortEvent::MergeRead {
                round: 1,
                from: p.member,
                into: m,
                bytes: n * KEY_BYTES,
            });
            if n > 0 {
                let handle = recv.expect("a buffer for the moved ranges");
                let dst = MemAt {
                    member: m,
                    handle,
                    offset: at,
                };
                self.move_run(p.at(from[i] * KEY_BYTES), dst, n * KEY_BYTES, mode)?;
                runs.push((handle, at, n));
                at += n * KEY_BYTES;
            }
        }
        Ok(runs)
    }

    /// The chunk loop of [`Job::multiway_slice`]: merges `slice.total` keys from
    /// `runs` (advanced as keys are taken) `slice.chunk` bytes at a time into
    /// `slice.outs[0]`, `[1]`, ... in turn; a writer thread writes each chunk to
    /// `slice.out_path` while the next one merges (a buffer is merged into again only
    /// once its last write is done). Returns the time the writes took.
    fn merge_chunks(
        &self,
        slice: &SliceMerge<'_>,
        runs: &mut [(MemHandle, u64, u64)],
    ) -> Result<u64, ArrayError> {
        let m = slice.member;
        let (to_writer, jobs) = std::sync::mpsc::channel::<(usize, u64, u64)>();
        let (done_tx, done) = std::sync::mpsc::channel::<Result<(), ArrayError>>();
        std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let mut busy = Duration::ZERO;
                for (i, off, len) in jobs {
                    let t = Instant::now();
                    let src = MemAt {
                        member: m,
                        handle: slice.outs[i],
                        offset: 0,
                    };
                    let r = self.write_mem_range(src, len, slice.out_path, off);
                    busy += t.elapsed();
                    let failed = r.is_err();
                    if done_tx.send(r).is_err() || failed {
                        break;
                    }
                }
                busy.as_nanos() as u64
            });
            let merged = (|| {
                let (mut written, mut in_flight) = (0u64, 0usize);
                let mut j = 0usize;
                while written < slice.total {
                    if in_flight == 2 {
                        // The buffer about to be reused: its write (the oldest) is done.
                        done.recv().map_err(|_| writer_gone())??;
                        in_flight -= 1;
                    }
                    let n = (slice.total - written).min(slice.chunk / KEY_BYTES);
                    self.merge_chunk(slice, runs, slice.outs[j % 2], n)?;
                    to_writer
                        .send((j % 2, written * KEY_BYTES, n * KEY_BYTES))
                        .map_err(|_| writer_gone())?;
                    in_flight += 1;
                    written += n;
                    j += 1;
                }
                Ok(())
            })();
            drop(to_writer);
            // Every write's result, also after a failed merge (the writer finishes its
            // queue); a failed write explains a merge loop that lost its writer.
            let mut first = Ok(());
            for r in done.iter() {
                if first.is_ok() {
                    first = r;
                }
            }
            if first.is_ok() {
                first = merged;
            }
            let busy = writer.join().expect("the output writer panicked");
            first.map(|()| busy)
        })
    }

    /// One Execute of the multiway merge: `n` keys from the runs with keys left into
    /// `out`; advances each run past the keys taken from it.
    fn merge_chunk(
        &self,
        slice: &SliceMerge<'_>,
        runs: &mut [(MemHandle, u64, u64)],
        out: MemHandle,
        n: u64,
    ) -> Result<(), ArrayError> {
        let m = slice.member;
        let live: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].2 > 0).collect();
        let table = KEY_BYTES * live.len() as u64;
        let mut req = ExecuteRequest::new(slice.prog)
            .window(out, 0, n * KEY_BYTES)
            .window(slice.taken, 0, table)
            .cparams(live.len() as u64, 0);
        for &i in &live {
            let (h, off, keys) = runs[i];
            req = req.window(h, off, keys * KEY_BYTES);
        }
        self.run(m, req, "multiway merge", n)?;
        let t = self
            .dev(m)
            .read_mem(slice.taken, 0, table)
            .map_err(self.array.member_error(m, "memory-read"))?;
        for (c, &i) in t.chunks_exact(8).zip(&live) {
            let used = u64::from_le_bytes(c.try_into().expect("chunks of 8"));
            if used > runs[i].2 {
                return Err(ArrayError::Other(format!(
                    "array member {m}: the multiway merge took {used} keys of a run of {}",
                    runs[i].2
                )));
            }
            runs[i].1 += used * KEY_BYTES;
            runs[i].2 -= used;
        }
        Ok(())
    }

    /// The key at byte `offset` of `buf` on member `m`.
    fn key_at(&self, m: u16, buf: MemHandle, offset: u64) -> Result<u64, ArrayError> {
        let b = self
            .dev(m)
            .read_mem(buf, offset, KEY_BYTES)
            .map_err(self.array.member_error(m, "memory-read"))?;
        let k: [u8; 8] = b.as_slice().try_into().map_err(|_| {
            ArrayError::Other(format!(
                "array member {m}: a key read returned {} bytes",
                b.len()
            ))
        })?;
        Ok(u64::from_le_bytes(k))
    }

    /// The co-rank of output key `k` of merging the left run of `runs` (`na` keys)
    /// with its right run (`nb` keys): `(i, k - i)` such that every key of left[..i]
    /// and right[..k - i] is at most every key of left[i..] and right[k - i..]. A
    /// binary search over i, two key reads per step.
    fn co_rank(&self, runs: RunPair, na: u64, nb: u64, k: u64) -> Result<(u64, u64), ArrayError> {
        let (mut lo, mut hi) = (k.saturating_sub(nb), k.min(na));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let j = k - mid;
            // mid < hi <= k, so j >= 1; mid >= k - nb, so j - 1 < nb.
            let a = self.key_at(runs.member, runs.buf, mid * KEY_BYTES)?;
            let b = self.key_at(runs.member, runs.buf, runs.split + (j - 1) * KEY_BYTES)?;
            if a < b {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok((lo, k - lo))
    }

    /// Memory Copy of `len` bytes of member `m`'s file `path` into `buf`, in chunks.
    fn copy_file(&self, m: u16, path: &str, len: u64, buf: MemHandle) -> Result<(), ArrayError> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            self.dev(m)
                .copy_file_to_mem(path, done, n, buf, done)
                .map_err(self.array.member_error(m, "memory-copy"))?;
            done += n;
        }
        Ok(())
    }

    /// File Write From Memory of `len` bytes from `src` into its member's file `path`
    /// at `file_off` (one stream: the file store writes under one lock, so two streams
    /// would not overlap).
    fn write_mem_range(
        &self,
        src: MemAt,
        len: u64,
        path: &str,
        file_off: u64,
    ) -> Result<(), ArrayError> {
        let m = src.member;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(WRITE_CHUNK);
            self.dev(m)
                .write_mem_to_file(
                    path,
                    file_off + done,
                    MemRange {
                        handle: src.handle,
                        offset: src.offset + done,
                        len: n,
                    },
                )
                .map_err(self.array.member_error(m, "file-write-from-memory"))?;
            done += n;
        }
        Ok(())
    }
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

/// Opens member `m`'s session and loads the sort's programs in it (those of the
/// optional functions only where the member has them). On failure the session drops
/// and unloads what it loaded.
fn open_member(array: &Array, m: u16) -> Result<MemberWork<'_>, ArrayError> {
    let dev = &array.members()[usize::from(m)].device;
    let err = || array.session_error(m);
    let mut session = Session::new(dev);
    let engine = if dev
        .identify()
        .map_err(array.member_error(m, "identify"))?
        .jit
    {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    let engines = u32::try_from(session.engines().map_err(err())?).unwrap_or(u32::MAX);
    let mut load = |name: &str, image: Vec<u8>| {
        session
            .load(name, ProgramType::Raw, &image, engine)
            .map_err(err())
    };
    let sort = load(
        "sort",
        sort_program(function_id(array, m, "csx_sort_u64")?)?,
    )?;
    let merge = load(
        "merge",
        merge_program(function_id(array, m, "csx_merge_u64")?)?,
    )?;
    // Optional: a device without it merges in place on one engine.
    let merge_into = match function_id(array, m, "csx_merge_into_u64") {
        Ok(id) => Some(load("merge slice", merge_into_program(id)?)?),
        Err(_) => None,
    };
    let merge_runs = match function_id(array, m, "csx_merge_runs_u64") {
        Ok(id) => Some(load("multiway merge", merge_runs_program(id)?)?),
        Err(_) => None,
    };
    Ok(MemberWork {
        session: Mutex::new(session),
        programs: Programs {
            sort,
            merge,
            merge_into,
            merge_runs,
            engines,
        },
    })
}

/// The input's path, the output's, and the input's entry, once it holds whole keys.
fn sort_ends(
    array: &Array,
    input: &str,
    options: &SortOptions,
) -> Result<(String, String, FileEntry), ArrayError> {
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
    Ok((input_path, output_path, entry))
}

impl<'a> Job<'a> {
    /// A sort's shared state before any member is opened; its runs are named after
    /// the output's id `out_id`.
    fn new(
        array: &'a Array,
        input: FileEntry,
        on_event: &'a (dyn Fn(&SortEvent) + Sync),
        out_id: u64,
    ) -> Job<'a> {
        Job {
            array,
            input,
            members: (0..array.members().len()).map(|_| None).collect(),
            events: Mutex::new(Vec::new()),
            on_event,
            failed: AtomicBool::new(false),
            output_ns: AtomicU64::new(0),
            final_out: Mutex::new(None),
            final_slices: std::sync::atomic::AtomicU32::new(0),
            run_prefix: array.member_path(out_id),
        }
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
    let (input_path, output_path, entry) = sort_ends(array, input, options)?;
    let before = array.links().snapshot();
    let out_id = array.reserve_id();
    let parts_sizes: Vec<(u16, u64)> = piece_sizes(&entry)
        .into_iter()
        .filter(|&(_, len)| len > 0)
        .collect();
    if parts_sizes.is_empty() {
        let ends = (input_path, output_path);
        let report = sort_nothing(array, &entry, ends, out_id, options, started)?;
        on_event(&report.events[0]);
        return Ok(report);
    }
    let mut job = Job::new(array, entry.clone(), on_event, out_id);
    let result = (|| {
        for &(m, _) in &parts_sizes {
            job.members[usize::from(m)] = Some(open_member(array, m)?);
        }
        run_sort(&job, &parts_sizes, options, out_id, started)
    })();
    // Cleanup, whatever happened: every member's programs and memory (the sort's
    // answer is committed or abandoned by now, so a release that fails changes neither;
    // the session tries every release); on failure the output piece.
    for work in job.members.iter_mut().filter_map(Option::take) {
        let session = work.session.into_inner().unwrap_or_else(|p| p.into_inner());
        let _ = session.close();
    }
    let (output_layout, sort_done) = match result {
        Ok(r) => r,
        Err(e) => {
            for m in 0..array.members().len() as u16 {
                let _ = job.dev(m).delete_file(&array.member_path(out_id));
            }
            return Err(e);
        }
    };
    let output_member = crate::array::layout_members(&output_layout)[0];
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
        output_layout,
        sort_wall_ns: sort_done.as_nanos() as u64,
        merge_wall_ns: total.saturating_sub(sort_done).as_nanos() as u64,
        total_wall_ns: total.as_nanos() as u64,
        output_wall_ns: job.output_ns.load(Ordering::Relaxed),
        final_merge_slices: job.final_slices.load(Ordering::Relaxed),
        links: diff(&after, &before),
        events,
    })
}

/// A sort of no keys: the output is an empty file, on the input's first member.
fn sort_nothing(
    array: &Array,
    entry: &FileEntry,
    (input_path, output_path): (String, String),
    out_id: u64,
    options: &SortOptions,
    started: Instant,
) -> Result<SortReport, ArrayError> {
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
    Ok(SortReport {
        input: input_path,
        output: output_path,
        mode: options.mode,
        topology: options.topology,
        bytes: 0,
        keys: 0,
        parts: 0,
        output_member: member,
        output_layout: Layout::Single { member },
        sort_wall_ns: 0,
        merge_wall_ns: 0,
        total_wall_ns: started.elapsed().as_nanos() as u64,
        output_wall_ns: 0,
        final_merge_slices: 0,
        links: crate::link::LinkCounters {
            members: vec![Default::default(); array.members().len()],
            ..Default::default()
        },
        events: vec![SortEvent::Committed { member, bytes: 0 }],
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

/// Where a merge left the result.
enum Merged {
    /// In this part's buffer (or the split final merge's, `Job::final_out`), still to
    /// be written.
    Part(usize),
    /// Written to the output's member files, laid out so.
    Written(Layout),
}

/// The sorts and merges, submitted together; returns the output's layout and when the
/// last sort finished.
fn run_sort(
    job: &Job<'_>,
    sizes: &[(u16, u64)],
    options: &SortOptions,
    out_id: u64,
    started: Instant,
) -> Result<(Layout, Duration), ArrayError> {
    let array = job.array;
    let total: u64 = sizes.iter().map(|&(_, l)| l).sum();
    let lens: Vec<u64> = sizes.iter().map(|&(_, l)| l).collect();
    let hold = holds(&lens, options.topology);
    // Before any sub-operation starts: each piece's blocks locked and a buffer allocated
    // for it in its member's memory, as large as the merges will grow it. The sorts
    // then stage their pieces in parallel.
    let (parts, mut guards) = job.lock_and_allocate(sizes, &hold)?;
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
            Topology::Chain => job.chain(&parts, options.mode).map(|()| Merged::Part(0)),
            Topology::Tree => job.tree(&parts, options.mode).map(Merged::Part),
            Topology::Multiway => job
                .multiway(&parts, options.mode, &array.member_path(out_id), total)
                .map(Merged::Written),
        });
        let sorts: Vec<Result<(), ArrayError>> = sorters
            .into_iter()
            .map(|h| h.join().expect("a sorter panicked"))
            .collect();
        (sorts, merger.join().expect("the merger panicked"))
    });
    // A failed sort unlocked its part unsorted, so the merge may have stopped or read
    // garbage: the sort's error wins.
    let result = (|| {
        for r in sorts {
            r?;
        }
        job.write_output(&parts, merged?, out_id, total)
    })();
    let layout = result?;
    let output = options
        .output
        .clone()
        .unwrap_or_else(|| job_input_path(job));
    array.commit(
        &normalize_path(&output)?,
        FileEntry {
            id: out_id,
            size_bytes: total,
            layout: layout.clone(),
        },
    )?;
    let d = *sort_done.lock().unwrap_or_else(|e| e.into_inner());
    Ok((layout, d))
}

impl Job<'_> {
    /// Before any sub-operation starts: each piece's blocks locked and a buffer
    /// allocated for it in its member's memory, as large as the merges will grow it
    /// (`hold`). On failure the locks taken so far are released as the guards drop.
    fn lock_and_allocate(
        &self,
        sizes: &[(u16, u64)],
        hold: &[u64],
    ) -> Result<(Vec<Part>, Vec<Option<LockGuard>>), ArrayError> {
        let array = self.array;
        let (mut parts, mut guards) = (Vec::new(), Vec::new());
        let piece = array.member_path(self.input.id);
        for (&(m, len), &hold) in sizes.iter().zip(hold) {
            let ext = self
                .dev(m)
                .extents(&piece)
                .map_err(array.member_error(m, "file-extents"))?;
            let mut ranges = Vec::new();
            let mut mapped = 0;
            for e in &ext.extents {
                // The piece may end inside its last block; lock whole blocks up to it.
                let len = e.len.min(len.saturating_sub(e.file_offset));
                if len == 0 {
                    continue;
                }
                mapped += len;
                ranges.push(BlockRange {
                    start: TaggedAddr::from_byte_offset(m, e.nvm_offset)?,
                    len,
                });
            }
            if mapped != len || ext.truncated {
                return Err(ArrayError::Other(format!(
                    "array member {m}: the piece of {len} bytes maps {mapped} bytes"
                )));
            }
            let owner = format!("sort on member {m}");
            guards.push(Some(array.locks().lock(&owner, &ranges, None)?));
            let buf = self.alloc(m, hold)?;
            parts.push(Part {
                member: m,
                len,
                buf,
                ranges,
            });
        }
        Ok((parts, guards))
    }

    /// Writes the merged result (unless the multiway merge wrote it already) to the
    /// output's member file and flushes it; returns the output's layout.
    fn write_output(
        &self,
        parts: &[Part],
        merged: Merged,
        out_id: u64,
        total: u64,
    ) -> Result<Layout, ArrayError> {
        let array = self.array;
        let out = match merged {
            Merged::Part(i) => &parts[i],
            Merged::Written(layout) => return Ok(layout),
        };
        let t = out.member;
        let out_path = array.member_path(out_id);
        let dev = self.dev(t);
        let writing = Instant::now();
        dev.put_bytes(&out_path, &[])
            .map_err(array.member_error(t, "file-write"))?;
        let result_buf = self
            .final_out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or(out.buf);
        let src = MemAt {
            member: t,
            handle: result_buf,
            offset: 0,
        };
        self.write_mem_range(src, total, &out_path, 0)?;
        dev.flush().map_err(array.member_error(t, "flush"))?;
        self.output_ns
            .store(writing.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Layout::Single { member: t })
    }
}

fn job_input_path(job: &Job<'_>) -> String {
    job.array
        .list("/")
        .into_iter()
        .find(|(_, e)| e.id == job.input.id)
        .map(|(p, _)| p)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The programs as the text assembler writes them.
    fn assembled(text: &str) -> Vec<u8> {
        csx_ebpf::asm::assemble(text)
            .expect("assembles")
            .iter()
            .flat_map(|i| i.encode())
            .collect()
    }

    #[test]
    fn the_programs_read_the_argument_block_where_the_abi_puts_it() {
        assert_eq!(sort_program(18).unwrap(), assembled("call 18\nexit"));
        assert_eq!(
            merge_program(19).unwrap(),
            assembled("ldxdw %r3, [%r5+0]\ncall 19\nexit")
        );
        assert_eq!(
            merge_into_program(23).unwrap(),
            assembled(
                "ldxdw %r3, [%r5+40]\nldxdw %r4, [%r5+48]\nldxdw %r5, [%r5+56]\ncall 23\nexit"
            )
        );
        assert_eq!(
            merge_runs_program(24).unwrap(),
            assembled(
                "mov %r3, %r5\nadd %r3, 56\nldxdw %r4, [%r5+0]\nldxdw %r5, [%r5+40]\ncall 24\nexit"
            )
        );
    }
}
