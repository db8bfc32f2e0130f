//! λ-IO's λ-read on an array file ([`read_lambda`]): a λ over a file placed on one
//! member or striped, each request run by the member holding its bytes (on that
//! member's device, or on the host from that member's image, as `csx_lambda` chooses),
//! the outputs handed back in file order.
//!
//! A request never crosses a stripe: the file is cut at every stripe boundary and then
//! into `chunk`-byte requests, so each request is one range of one member file
//! (`/csx-array/ARRAY/ID` on its member). Members work at once, `threads` requests in
//! flight each; the outputs are reordered into file order before the sink sees them.
//! With `record`, `cparam1` gets the request's first record index in the array file
//! (not in the member file), so a λ numbering records (knn) sees the numbers a
//! single-device read would give it.
//!
//! A member without a host image here (a daemon over tcp) runs `Auto` requests on its
//! device: the host side would need its image.
//!
//! [`ArrayLambdaOptions::stop`] (Ctrl-C in `csx read`) stops the read on every member
//! at once: each member's λ-IO stop flag is set, which aborts its device runs (an Abort
//! of each Execute in flight) and stops its host runs; no further request starts, the λ
//! is unloaded from every member, and the read fails with [`ArrayError::Aborted`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csx_lambda::{Lambda, LambdaArgs, LambdaError, LambdaIo, LambdaOptions, LambdaOutput, Mode};
use csx_lambda::{Parallelism, RunAccount};

use crate::array::Array;
use crate::desc::{FileEntry, Layout};
use crate::error::ArrayError;

/// Largest request: the device's largest staging window is far below this; it bounds
/// the host buffers one request holds.
pub const CHUNK_MAX: u64 = 1 << 30;

/// How [`read_lambda`] runs.
#[derive(Clone, Debug)]
pub struct ArrayLambdaOptions {
    /// Bytes per request (at most; stripe boundaries cut requests shorter).
    pub chunk: u64,
    pub mode: Mode,
    /// Fixed-size records: `chunk` and the stripe must be multiples of it.
    pub record: Option<u64>,
    /// Requests in flight per member.
    pub threads: u32,
    /// Each member's λ-IO settings (its state directory is found per member).
    pub lambda: LambdaOptions,
    /// Set (from any thread, e.g. a Ctrl-C handler): every member's runs are aborted
    /// and the read fails with [`ArrayError::Aborted`] (see the module doc).
    pub stop: Arc<AtomicBool>,
}

/// How often each member's worker looks at [`ArrayLambdaOptions::stop`].
const STOP_POLL: Duration = Duration::from_millis(5);

impl Default for ArrayLambdaOptions {
    fn default() -> Self {
        ArrayLambdaOptions {
            chunk: 8 << 20,
            mode: Mode::Auto,
            record: None,
            threads: 1,
            lambda: LambdaOptions::default(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The λ to run: an ELF object or raw bytecode, `entry` picking its function; `name`
/// keys each member's dispatcher profile.
#[derive(Clone, Copy, Debug)]
pub struct LambdaImage<'a> {
    pub name: &'a str,
    pub image: &'a [u8],
    pub entry: Option<&'a str>,
}

/// One request: a range of the array file and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Position in file order.
    pub index: u64,
    pub file_offset: u64,
    pub len: u64,
    pub member: u16,
    /// Where in the member's piece.
    pub member_offset: u64,
}

/// What [`read_lambda`] did, per member.
#[derive(Clone, Debug, Default)]
pub struct ArrayLambdaReport {
    pub requests: u64,
    pub input_bytes: u64,
    pub output_bytes: u64,
    /// `(member, its requests' account)`, for the members holding part of the file.
    pub members: Vec<(u16, RunAccount)>,
}

/// The requests of a `size`-byte file of `layout`, in file order (see the module doc).
pub fn plan(size: u64, layout: &Layout, chunk: u64) -> Vec<Request> {
    let (stripe, order) = crate::array::stripes(layout);
    let n = order.len() as u64;
    let mut out = Vec::new();
    let mut off = 0u64;
    while off < size {
        let (k, within) = if stripe == u64::MAX {
            (0, off)
        } else {
            (off / stripe, off % stripe)
        };
        let stripe_left = if stripe == u64::MAX {
            u64::MAX
        } else {
            stripe - within
        };
        let len = chunk.min(stripe_left).min(size - off);
        let member_offset = if stripe == u64::MAX {
            off
        } else {
            (k / n) * stripe + within
        };
        out.push(Request {
            index: out.len() as u64,
            file_offset: off,
            len,
            member: order[(k % n) as usize],
            member_offset,
        });
        off += len;
    }
    out
}

fn lambda_error(
    array: &Array,
    member: u16,
    op: &'static str,
    file_offset: Option<u64>,
    source: LambdaError,
) -> ArrayError {
    ArrayError::Lambda {
        member,
        uri: array.members()[usize::from(member)].uri.clone(),
        op,
        file_offset,
        source: Box::new(source),
    }
}

/// Outputs finished out of order, passed on in order.
struct Ordered<'s> {
    next: u64,
    pending: BTreeMap<u64, (Request, LambdaOutput)>,
    sink: &'s mut (dyn FnMut(&Request, &LambdaOutput) -> Result<(), ArrayError> + Send),
    output_bytes: u64,
}

impl Ordered<'_> {
    fn put(&mut self, req: Request, out: LambdaOutput) -> Result<(), ArrayError> {
        self.pending.insert(req.index, (req, out));
        while let Some((r, o)) = self.pending.remove(&self.next) {
            self.output_bytes += o.output.len() as u64;
            (self.sink)(&r, &o)?;
            self.next += 1;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every guarded value is updated whole; a panic cannot leave it half-made.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the λ `lambda` over the array file `path`, request by request on the members holding the bytes, and
/// hands each request's output to `sink` in file order (see the module doc).
///
/// The λ is loaded on every member holding part of the file and unloaded from each at
/// the end, also on failure. A λ that does not load or fails on a member gives
/// [`ArrayError::Lambda`] naming the member; a failed request also names its file
/// offset (`op`). Stopped through [`ArrayLambdaOptions::stop`], it fails with
/// [`ArrayError::Aborted`] once no member runs a request any more.
pub fn read_lambda(
    array: &Array,
    path: &str,
    lambda: LambdaImage<'_>,
    args: &LambdaArgs,
    opts: &ArrayLambdaOptions,
    sink: &mut (dyn FnMut(&Request, &LambdaOutput) -> Result<(), ArrayError> + Send),
) -> Result<ArrayLambdaReport, ArrayError> {
    let entry_desc = checked_entry(array, path, opts)?;
    let mpath = array.member_path(entry_desc.id);
    let requests = plan(entry_desc.size_bytes, &entry_desc.layout, opts.chunk);
    let loaded = load_on(array, &members_of(&requests), &lambda)?;

    let ordered = Mutex::new(Ordered {
        next: 0,
        pending: BTreeMap::new(),
        sink,
        output_bytes: 0,
    });
    let failed = AtomicBool::new(false);
    // Members whose runs ended aborted (by the stop flag).
    let aborted = Mutex::new(Vec::new());
    let result: Result<Vec<(u16, RunAccount)>, ArrayError> = std::thread::scope(|s| {
        let handles: Vec<_> = loaded
            .iter()
            .map(|(m, lambda)| {
                let m = *m;
                let mine: Vec<Request> =
                    requests.iter().filter(|r| r.member == m).copied().collect();
                let shared = ReadShared {
                    array,
                    mpath: &mpath,
                    args,
                    opts,
                    ordered: &ordered,
                    failed: &failed,
                };
                s.spawn(move || {
                    member_requests(shared, m, lambda, &mine)
                        .inspect_err(|_| shared.failed.store(true, Ordering::Relaxed))
                })
            })
            .collect();
        join_members(handles, &aborted)
    });
    let unloaded = unload_all(array, loaded);
    if opts.stop.load(Ordering::SeqCst) {
        // Whatever each member's runs ended with (aborted, mostly), the read was stopped.
        unloaded?;
        let mut members = aborted.into_inner().unwrap_or_else(|p| p.into_inner());
        members.sort_unstable();
        return Err(ArrayError::Aborted {
            what: "λ read",
            members,
        });
    }
    let members = result?;
    unloaded?;
    let ordered = ordered.into_inner().unwrap_or_else(|p| p.into_inner());
    debug_assert!(ordered.pending.is_empty());
    Ok(ArrayLambdaReport {
        requests: requests.len() as u64,
        input_bytes: entry_desc.size_bytes,
        output_bytes: ordered.output_bytes,
        members,
    })
}

/// The members holding requests, in tag order.
fn members_of(requests: &[Request]) -> Vec<u16> {
    let mut involved: Vec<u16> = requests.iter().map(|r| r.member).collect();
    involved.sort_unstable();
    involved.dedup();
    involved
}

/// One member's worker: its account, or why it failed.
type MemberResult = Result<(u16, RunAccount), ArrayError>;

/// Waits for every member's worker: their accounts, or the first failure (the members
/// whose runs ended aborted go to `aborted`).
fn join_members(
    handles: Vec<std::thread::ScopedJoinHandle<'_, MemberResult>>,
    aborted: &Mutex<Vec<u16>>,
) -> Result<Vec<(u16, RunAccount)>, ArrayError> {
    let mut accounts = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join().expect("a member's λ worker panicked") {
            Ok(a) => accounts.push(a),
            Err(e) => {
                if let ArrayError::Lambda { member, source, .. } = &e {
                    if matches!(**source, LambdaError::Aborted { .. }) {
                        lock(aborted).push(*member);
                    }
                }
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(accounts),
    }
}

/// The file `path`'s entry, once the options are within their bounds and a record
/// size divides the request size and the file's stripe.
fn checked_entry(
    array: &Array,
    path: &str,
    opts: &ArrayLambdaOptions,
) -> Result<FileEntry, ArrayError> {
    if opts.chunk == 0 || opts.chunk > CHUNK_MAX {
        return Err(ArrayError::OutOfRange {
            what: "λ request size (--chunk)",
            value: opts.chunk,
            min: 1,
            max: CHUNK_MAX,
        });
    }
    if opts.threads == 0 || opts.threads > 256 {
        return Err(ArrayError::OutOfRange {
            what: "requests in flight per member (--threads)",
            value: u64::from(opts.threads),
            min: 1,
            max: 256,
        });
    }
    let entry = array.stat(path)?;
    if let Some(r) = opts.record {
        if r == 0 || !opts.chunk.is_multiple_of(r) {
            return Err(ArrayError::Unaligned {
                what: "λ request size (--chunk)",
                value: opts.chunk,
                align: r,
            });
        }
        if let Layout::Striped { stripe_bytes, .. } = entry.layout {
            if !stripe_bytes.is_multiple_of(r) {
                return Err(ArrayError::Unaligned {
                    what: "the file's stripe",
                    value: stripe_bytes,
                    align: r,
                });
            }
        }
    }
    Ok(entry)
}

/// Loads the λ on each of `members`; on a failure unloads those loaded and reports the
/// load's error.
fn load_on<'a>(
    array: &'a Array,
    members: &[u16],
    lambda: &LambdaImage<'_>,
) -> Result<Vec<(u16, Lambda<'a>)>, ArrayError> {
    let mut loaded: Vec<(u16, Lambda<'a>)> = Vec::new();
    for &m in members {
        let dev = &array.members()[usize::from(m)].device;
        match Lambda::load(dev, lambda.name, lambda.image, lambda.entry) {
            Ok(l) => loaded.push((m, l)),
            Err(e) => {
                // The load error is the one to report.
                let _ = unload_all(array, loaded);
                return Err(lambda_error(array, m, "load the λ", None, e));
            }
        }
    }
    Ok(loaded)
}

/// Unloads every loaded λ; the first failure, naming its member.
fn unload_all(array: &Array, loaded: Vec<(u16, Lambda<'_>)>) -> Result<(), ArrayError> {
    let mut first = Ok(());
    for (m, l) in loaded {
        if let Err(e) = l.unload() {
            if first.is_ok() {
                first = Err(lambda_error(array, m, "unload the λ", None, e));
            }
        }
    }
    first
}

/// What every member's worker of one λ read shares.
#[derive(Clone, Copy)]
struct ReadShared<'a, 's> {
    array: &'a Array,
    /// The file's member path.
    mpath: &'a str,
    args: &'a LambdaArgs,
    opts: &'a ArrayLambdaOptions,
    ordered: &'a Mutex<Ordered<'s>>,
    /// Set by a worker that failed: the others stop at their next request.
    failed: &'a AtomicBool,
}

/// Member `m`'s λ-IO handle (with the read's parallelism) and the mode it runs in: a
/// member served from elsewhere has no host side here, so its Auto runs on the device.
fn member_io<'a>(
    array: &'a Array,
    m: u16,
    opts: &ArrayLambdaOptions,
) -> Result<(LambdaIo<'a>, Mode), ArrayError> {
    let dev = &array.members()[usize::from(m)].device;
    let mut lopts = opts.lambda.clone();
    if opts.threads > 1 && lopts.parallelism.is_none() {
        let engines = dev
            .identify()
            .map_err(array.member_error(m, "identify"))?
            .engines
            .max(1);
        lopts.parallelism = Some(Parallelism {
            host_threads: opts.threads,
            device_engines: engines,
        });
    }
    let io = LambdaIo::new(dev, &lopts).map_err(|e| lambda_error(array, m, "λ-IO", None, e))?;
    let mode = match (opts.mode, io.local()) {
        (Mode::Auto, Err(_)) => Mode::Device,
        (mode, _) => mode,
    };
    Ok((io, mode))
}

/// One member's requests, `opts.threads` at a time; stops early when another member
/// failed.
fn member_requests(
    shared: ReadShared<'_, '_>,
    m: u16,
    lambda: &Lambda,
    mine: &[Request],
) -> Result<(u16, RunAccount), ArrayError> {
    let ReadShared {
        array,
        mpath,
        args,
        opts,
        ordered,
        failed,
    } = shared;
    let (io, mode) = member_io(array, m, opts)?;
    let file = io
        .open(mpath)
        .map_err(|e| lambda_error(array, m, "open its piece", None, e))?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let account = Mutex::new(RunAccount::default());
    let worker = || -> Result<(), ArrayError> {
        loop {
            if failed.load(Ordering::Relaxed) || opts.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(req) = mine.get(i) else {
                return Ok(());
            };
            let mut call = args.clone();
            if let Some(r) = opts.record {
                call.cparam1 += req.file_offset / r;
            }
            let out = file
                .read_lambda(req.member_offset, req.len, lambda, &call, mode)
                .map_err(|e| lambda_error(array, m, "run the λ", Some(req.file_offset), e))?;
            lock(&account).add(req.len, &out);
            lock(ordered).put(*req, out)?;
        }
    };
    let workers_done = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), ArrayError> {
        // Forwards the array's stop to this member's λ-IO: its device runs in flight
        // get an Abort, its host runs stop within one fuel slice (`STOP_SLICE`).
        let flag = io.stop_flag();
        let workers_done = &workers_done;
        s.spawn(move || {
            while !workers_done.load(Ordering::Relaxed) {
                if opts.stop.load(Ordering::Relaxed) {
                    flag.stop(1);
                    return;
                }
                std::thread::sleep(STOP_POLL);
            }
        });
        let hs: Vec<_> = (0..opts.threads).map(|_| s.spawn(worker)).collect();
        let mut first = Ok(());
        for h in hs {
            let r = h.join().expect("a λ request worker panicked");
            if first.is_ok() {
                first = r;
            }
        }
        workers_done.store(true, Ordering::Relaxed);
        first
    })?;
    drop(file);
    Ok((m, account.into_inner().unwrap_or_else(|p| p.into_inner())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_never_cross_a_stripe_and_cover_the_file_in_order() {
        let layout = Layout::Striped {
            stripe_bytes: 4096,
            members: vec![0, 1, 2],
        };
        let size = 4096 * 7 + 100;
        let reqs = plan(size, &layout, 3000);
        let mut off = 0;
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(r.index, i as u64);
            assert_eq!(r.file_offset, off);
            let k = off / 4096;
            assert_eq!(r.member, (k % 3) as u16, "{r:?}");
            assert_eq!(r.member_offset, (k / 3) * 4096 + off % 4096, "{r:?}");
            assert!(off % 4096 + r.len <= 4096, "{r:?} crosses a stripe");
            off += r.len;
        }
        assert_eq!(off, size);
        // 7 full stripes cut 3000 + 1096, and the 100-byte tail.
        assert_eq!(reqs.len(), 15);

        let single = plan(10_000, &Layout::Single { member: 2 }, 4096);
        assert_eq!(
            single
                .iter()
                .map(|r| (r.member, r.member_offset, r.len))
                .collect::<Vec<_>>(),
            vec![(2, 0, 4096), (2, 4096, 4096), (2, 8192, 1808)]
        );
        assert!(plan(0, &layout, 4096).is_empty());
    }
}
