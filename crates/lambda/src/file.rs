//! [`LambdaIo`] (one per device: the host image, the host cache, device memory for
//! staging, the dispatcher) and [`LambdaFile`] (a device file opened for λ-reads and
//! λ-writes).
//!
//! A λ-read of `len` bytes at `offset`, on each side:
//!
//! ```text
//!   device  Memory Copy file range → SLM [0, len)           media (+ latency)
//!           Execute λ, window 0 = [0, len), window 1 = [len, len + out)   compute
//!           Memory Read r0 bytes of window 1                  link (+ latency)
//!   host    cache ratio c of the range (mincore)
//!           buffered pread of the range's image extents       (1 − c)·len over media, link
//!                                                             and the host's I/O stack
//!           run λ on the host JIT over the same windows       executed work × host costs
//! ```
//!
//! A λ-write of `input` at `offset`:
//!
//! ```text
//!   device  Memory Write input → SLM; Execute λ; File Write From Memory r0 bytes; Flush
//!   host    run λ on the host; File Write the r0 bytes; Flush
//!   both    then drop the written range from the host cache
//! ```
//!
//! Modelled time (deterministic): the device side sums its completions'
//! `timing.modelled_ns`; the host side is `perf.host_work_ns(work)` (the instructions λ
//! executed, per class, at the host core's costs) plus the uncached
//! bytes over the device's media and link (λ-IO eq. 3), and through the host kernel's
//! I/O stack (booked with the link: the host's read path), for a read, and plus its File
//! Write completions for a write. Each command's link latency counts against the
//! resource the command uses ([`SideCost`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use csx_device::offload::PerfModel;
use csx_ebpf::count::WorkCounts;
use csx_ebpf::engine::StopFlag;
use csx_proto::limits::FILE_IO_SIZE_MAX;
use csx_proto::{Completion, CopySource, MemHandle, MemRange, Op, Reply, WriteMode};

use super::dispatch::{Choice, DeviceFloor, Direction, Dispatcher, Key, Parallelism, Sample, Side};
use super::local::{ImageRange, LocalImage};
use super::program::{Lambda, LambdaArgs};
use super::LambdaError;
use csx_host::session::Session;
use csx_host::Device;
use csx_host::DeviceUri;
use csx_host::{CallError, ExecuteRequest, Execution};

/// How often a device-side λ run waiting for its completion looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(10);

/// Default host cache budget: 1 GiB.
pub const CACHE_BUDGET_DEFAULT: u64 = 1 << 30;

/// Smallest SLM staging allocation; requests round up to a power of two from here, so a
/// stream of equal chunks reuses one allocation.
pub const STAGING_SIZE_MIN: u64 = 64 << 10;

/// Where requests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Host,
    Device,
    /// The dispatcher chooses per request ([`super::dispatch`]).
    Auto,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "host" => Ok(Mode::Host),
            "device" => Ok(Mode::Device),
            "auto" => Ok(Mode::Auto),
            _ => Err(format!("unknown mode {s:?}, known: host, device, auto")),
        }
    }
}

/// Settings of a [`LambdaIo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LambdaOptions {
    /// The host cache budget (see `local`).
    pub cache_budget_bytes: u64,
    /// The device's state directory on this machine, for a device served by a daemon
    /// here (`shm://`); embedded devices know theirs.
    pub state_dir: Option<PathBuf>,
    /// Dispatcher profiling period `n` and length `k`.
    pub period: u32,
    pub profile_len: u32,
    /// Requests in flight for the dispatcher's predictions (`None`: one alone).
    pub parallelism: Option<Parallelism>,
}

impl Default for LambdaOptions {
    fn default() -> Self {
        LambdaOptions {
            cache_budget_bytes: CACHE_BUDGET_DEFAULT,
            state_dir: None,
            period: super::dispatch::PERIOD_DEFAULT,
            profile_len: super::dispatch::PROFILE_LEN_DEFAULT,
            parallelism: None,
        }
    }
}

/// What one side spent on one request, in modelled ns by resource, and what it moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SideCost {
    /// Storage media (device reads and writes of the NVM).
    pub media_ns: u64,
    /// The host ↔ device link.
    pub link_ns: u64,
    /// Running λ (host core or device engine).
    pub compute_ns: u64,
    /// Per-command link latency (doorbell and completion): part of the request's time,
    /// but no resource is busy with it (many commands wait at once).
    pub latency_ns: u64,
    pub link_bytes: u64,
    pub media_bytes: u64,
    pub fuel: u64,
    /// Instructions λ executed (all classes; `csx_ebpf::count`).
    pub insns: u64,
}

impl SideCost {
    /// The request's modelled duration on this side: its stages one after another.
    pub fn modelled_ns(&self) -> u64 {
        self.media_ns + self.link_ns + self.compute_ns + self.latency_ns
    }

    /// Books an execution's modelled time (latency apart, the rest compute).
    fn book_execution(&mut self, run: &Execution, latency_ns: u64) {
        let latency = latency_ns.min(run.timing.modelled_ns);
        self.latency_ns += latency;
        self.compute_ns += run.timing.modelled_ns - latency;
    }

    /// Books a completion's modelled time: its latency apart, the rest on `resource`.
    fn book(&mut self, c: &Completion, latency_ns: u64, resource: Resource) {
        let latency = latency_ns.min(c.timing.modelled_ns);
        self.latency_ns += latency;
        let rest = c.timing.modelled_ns - latency;
        match resource {
            Resource::Media => self.media_ns += rest,
            Resource::Link => self.link_ns += rest,
        }
    }
}

/// What a command keeps busy.
#[derive(Clone, Copy, Debug)]
enum Resource {
    Media,
    Link,
}

/// Where a request ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    Host,
    Device,
    /// A profiled request: both sides ran and agreed.
    Both,
}

/// One request's answer and account.
#[derive(Clone, Debug, PartialEq)]
pub struct LambdaOutput {
    /// The first r0 bytes of the output window (read); the bytes written (write).
    pub output: Vec<u8>,
    pub ran: Ran,
    /// The cached fraction of the input when the request was decided (reads; 0 when the
    /// host side was not consulted).
    pub cache_ratio: f64,
    pub host: Option<SideCost>,
    pub device: Option<SideCost>,
    /// Predicted (host, device) ns when the dispatcher chose without profiling.
    pub predicted_ns: Option<(f64, f64)>,
}

impl LambdaOutput {
    /// Modelled ns of the request: the side that ran, or the slower side of a profiled
    /// request (both ran at once).
    pub fn modelled_ns(&self) -> u64 {
        let h = self.host.map_or(0, |c| c.modelled_ns());
        let d = self.device.map_or(0, |c| c.modelled_ns());
        h.max(d)
    }
}

/// λ-IO on one device (see the module doc). Shared by threads: every method takes
/// `&self`.
pub struct LambdaIo<'d> {
    dev: &'d Device,
    local: Result<LocalImage, String>,
    perf: Option<PerfModel>,
    dispatcher: Mutex<Dispatcher>,
    /// Holds the staging allocations: kept for reuse between requests, freed when the
    /// handle is dropped (also in a panic).
    session: Mutex<Session<'d>>,
    /// Set: every λ run of this handle stops (see [`LambdaIo::stop_flag`]).
    stop: Arc<StopFlag>,
}

impl std::fmt::Debug for LambdaIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaIo")
            .field("local", &self.local)
            .field("perf", &self.perf)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every guarded value is updated whole; a panic cannot leave it half-made.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<'d> LambdaIo<'d> {
    /// λ-IO on `dev`. The host side is available when the device's state directory is
    /// on this machine (embedded, or `options.state_dir`); otherwise host and auto
    /// requests fail with [`LambdaError::NoLocalImage`] naming why.
    pub fn new(dev: &'d Device, options: &LambdaOptions) -> Result<LambdaIo<'d>, LambdaError> {
        let mut dispatcher = Dispatcher::new(options.period, options.profile_len)
            .map_err(|e| LambdaError::Options(e.to_string()))?;
        dispatcher.set_parallelism(options.parallelism);
        let dir: Option<PathBuf> = match (&options.state_dir, dev.uri()) {
            (Some(d), _) => Some(d.clone()),
            (None, DeviceUri::Embedded(d)) => Some(d.clone()),
            _ => None,
        };
        let (local, perf) = match dir {
            None => (
                Err(format!(
                    "device {} is not embedded and no state directory was given",
                    dev.uri()
                )),
                None,
            ),
            Some(dir) => open_local(&dir, options.cache_budget_bytes),
        };
        Ok(LambdaIo {
            dev,
            local,
            perf,
            dispatcher: Mutex::new(dispatcher),
            session: Mutex::new(Session::new(dev)),
            stop: Arc::new(StopFlag::new()),
        })
    }

    /// The flag that stops this handle's λ runs (Ctrl-C in `csx read`): once set, with
    /// any reason, a host run stops at its next back-edge or call, a device run is
    /// aborted (an Abort of its Execute), and later requests fail at once, all with
    /// [`LambdaError::Aborted`].
    pub fn stop_flag(&self) -> Arc<StopFlag> {
        Arc::clone(&self.stop)
    }

    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// The device's performance model, when its state directory is on this machine.
    pub fn perf(&self) -> Option<&PerfModel> {
        self.perf.as_ref()
    }

    /// The link latency every command's modelled time includes (0 when the device's
    /// model is not known here: then it counts against the command's resource).
    fn latency_ns(&self) -> u64 {
        self.perf.as_ref().map_or(0, |p| p.link_latency_ns)
    }

    /// The host image, or why there is none.
    pub fn local(&self) -> Result<&LocalImage, LambdaError> {
        self.local
            .as_ref()
            .map_err(|why| LambdaError::NoLocalImage {
                uri: self.dev.uri().to_string(),
                reason: why.clone(),
            })
    }

    fn host_parts(&self) -> Result<(&LocalImage, &PerfModel), LambdaError> {
        let local = self.local()?;
        let perf = self
            .perf
            .as_ref()
            .expect("a local image comes with its model");
        Ok((local, perf))
    }

    /// The dispatcher: its decision trace and counters.
    pub fn dispatcher(&self) -> MutexGuard<'_, Dispatcher> {
        lock(&self.dispatcher)
    }

    /// Empties the host cache: the whole image leaves the OS page cache.
    pub fn cache_drop(&self) -> Result<(), LambdaError> {
        self.local()?.drop_all().map_err(LambdaError::local("drop"))
    }

    /// Opens the device file `path`.
    pub fn open(&self, path: &str) -> Result<LambdaFile<'_, 'd>, LambdaError> {
        let mut f = LambdaFile {
            io: self,
            path: path.to_string(),
            size_bytes: 0,
            extents: Vec::new(),
        };
        f.refresh()?;
        Ok(f)
    }

    /// A staging allocation of at least `size_bytes` (reused across requests): sizes
    /// round up to a power of two from [`STAGING_SIZE_MIN`], so a stream of equal
    /// chunks reuses one allocation; when the device is short of memory, idle ones
    /// are freed and the allocation is retried.
    fn take_staging(&self, size_bytes: u64) -> Result<(MemHandle, u64), LambdaError> {
        let size = size_bytes.max(STAGING_SIZE_MIN).next_power_of_two();
        Ok(lock(&self.session).take(size)?)
    }

    /// Runs `f` on a staging allocation of at least `size_bytes`, then keeps it for
    /// reuse whatever `f` returned.
    fn with_staging<T>(
        &self,
        size_bytes: u64,
        f: impl FnOnce(MemHandle) -> Result<T, LambdaError>,
    ) -> Result<T, LambdaError> {
        let (h, size) = self.take_staging(size_bytes)?;
        let r = f(h);
        lock(&self.session).keep(h, size);
        r
    }
}

fn open_local(dir: &Path, budget: u64) -> (Result<LocalImage, String>, Option<PerfModel>) {
    let image = dir.join(csx_device::offload::NVM_FILE_NAME);
    let perf = match csx_device::offload::DeviceConfig::load(dir) {
        Ok(c) => c.perf,
        Err(e) => {
            return (
                Err(format!("cannot read the device's configuration: {e}")),
                None,
            )
        }
    };
    match LocalImage::open(&image, budget) {
        Ok(l) => (Ok(l), Some(perf)),
        Err(e) => (
            Err(format!("cannot open the image {}: {e}", image.display())),
            None,
        ),
    }
}

/// A device file opened for λ requests.
#[derive(Debug)]
pub struct LambdaFile<'a, 'd> {
    io: &'a LambdaIo<'d>,
    path: String,
    size_bytes: u64,
    extents: Vec<csx_proto::ExtentInfo>,
}

/// A piece of a file range (see [`LambdaFile::pieces`]).
#[derive(Clone, Copy, Debug)]
enum Piece {
    Image(ImageRange),
    Hole(u64),
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Image(r) => r.len,
            Piece::Hole(n) => *n,
        }
    }
}

/// Runs on one side: output and account.
struct SideRun {
    output: Vec<u8>,
    cost: SideCost,
}

impl<'a, 'd> LambdaFile<'a, 'd> {
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Re-reads the file's size and extents (after it changed).
    pub fn refresh(&mut self) -> Result<(), LambdaError> {
        let dev = self.io.dev;
        self.size_bytes = dev.stat(&self.path)?.size_bytes;
        let ext = dev.extents(&self.path)?;
        if ext.truncated {
            return Err(LambdaError::TooManyExtents {
                path: self.path.clone(),
            });
        }
        self.extents = ext.extents;
        self.extents.sort_by_key(|e| e.file_offset);
        Ok(())
    }

    fn key(&self, lambda: &Lambda, direction: Direction) -> Key {
        Key {
            path: self.path.clone(),
            lambda: lambda.name().to_string(),
            direction,
        }
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(), LambdaError> {
        if len == 0
            || offset
                .checked_add(len)
                .is_none_or(|end| end > self.size_bytes)
        {
            return Err(LambdaError::OutOfRange {
                path: self.path.clone(),
                offset,
                len,
                size_bytes: self.size_bytes,
            });
        }
        Ok(())
    }

    /// `[offset, offset + len)` of the file as pieces in file order: runs of the image,
    /// and holes no extent covers (zeros, as the device reads them).
    fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        let end = offset + len;
        let mut out = Vec::new();
        let mut at = offset;
        for e in &self.extents {
            let (lo, hi) = (e.file_offset, e.file_offset + e.len);
            if hi <= at || lo >= end {
                continue;
            }
            if lo > at {
                out.push(Piece::Hole(lo - at));
                at = lo;
            }
            let take_end = hi.min(end);
            out.push(Piece::Image(ImageRange {
                image_offset: e.nvm_offset + (at - lo),
                len: take_end - at,
            }));
            at = take_end;
            if at == end {
                break;
            }
        }
        if at < end {
            out.push(Piece::Hole(end - at));
        }
        debug_assert_eq!(out.iter().map(Piece::len).sum::<u64>(), len);
        out
    }

    /// The image ranges holding `[offset, offset + len)` of the file, in file order
    /// (holes left out).
    pub fn image_ranges(&self, offset: u64, len: u64) -> Vec<ImageRange> {
        self.pieces(offset, len)
            .into_iter()
            .filter_map(|p| match p {
                Piece::Image(r) => Some(r),
                Piece::Hole(_) => None,
            })
            .collect()
    }

    /// Bytes of `pieces` that cost no I/O: cached in the page cache, or holes.
    fn cached_bytes(&self, local: &LocalImage, pieces: &[Piece]) -> Result<u64, LambdaError> {
        let mut cached = 0;
        let mut images = Vec::new();
        for p in pieces {
            match p {
                Piece::Image(r) => images.push(*r),
                Piece::Hole(n) => cached += n,
            }
        }
        Ok(cached
            + local
                .cached_bytes(&images)
                .map_err(LambdaError::local("mincore"))?)
    }

    /// The cached fraction of `[offset, offset + len)` in the host's page cache (holes
    /// count as cached: reading them costs nothing).
    pub fn cache_ratio(&self, offset: u64, len: u64) -> Result<f64, LambdaError> {
        self.check_range(offset, len)?;
        let local = self.io.local()?;
        let cached = self.cached_bytes(local, &self.pieces(offset, len))?;
        Ok(cached as f64 / len as f64)
    }

    /// Reads `[offset, offset + len)` on the host through the page cache (a plain
    /// buffered read: λ-IO's Buffer IO mode), with its modelled I/O cost.
    pub fn read_plain(&self, offset: u64, len: u64) -> Result<(Vec<u8>, SideCost), LambdaError> {
        self.check_range(offset, len)?;
        let (local, perf) = self.io.host_parts()?;
        let pieces = self.pieces(offset, len);
        let cached = self.cached_bytes(local, &pieces)?;
        let mut buf = vec![0u8; len as usize];
        let mut at = 0usize;
        for p in &pieces {
            let n = p.len() as usize;
            if let Piece::Image(r) = p {
                local
                    .read(&[*r], &mut buf[at..at + n])
                    .map_err(LambdaError::local("read"))?;
            }
            at += n;
        }
        let uncached = len - cached;
        let cost = SideCost {
            media_ns: perf.media_ns(uncached),
            // The host's read path: the link, then its kernel's I/O stack (λ-IO's
            // measured cost, `PerfModel::host_stack_ns`), one after the other.
            link_ns: perf.link_ns(uncached) + perf.host_stack_ns(uncached),
            compute_ns: 0,
            latency_ns: 0,
            link_bytes: uncached,
            media_bytes: uncached,
            fuel: 0,
            insns: 0,
        };
        Ok((buf, cost))
    }

    /// Runs `lambda` over `[offset, offset + len)` of the file in `mode`; the output is
    /// the first r0 bytes of the output window.
    pub fn read_lambda(
        &self,
        offset: u64,
        len: u64,
        lambda: &Lambda,
        args: &LambdaArgs,
        mode: Mode,
    ) -> Result<LambdaOutput, LambdaError> {
        self.check_range(offset, len)?;
        match mode {
            Mode::Host => {
                let c = self.cache_ratio(offset, len)?;
                let h = self.read_host(offset, len, lambda, args)?;
                Ok(single(Ran::Host, h, c))
            }
            Mode::Device => {
                let d = self.read_device(offset, len, lambda, args)?;
                Ok(single(Ran::Device, d, 0.0))
            }
            Mode::Auto => {
                let c = self.cache_ratio(offset, len)?;
                let key = self.key(lambda, Direction::Read);
                let choice = self.io.dispatcher().decide(&key, len, c);
                let predicted = self.predicted();
                match choice {
                    Choice::Run(Side::Host) => {
                        let h = self.read_host(offset, len, lambda, args)?;
                        Ok(LambdaOutput {
                            predicted_ns: predicted,
                            ..single(Ran::Host, h, c)
                        })
                    }
                    Choice::Run(Side::Device) => {
                        let d = self.read_device(offset, len, lambda, args)?;
                        Ok(LambdaOutput {
                            predicted_ns: predicted,
                            ..single(Ran::Device, d, c)
                        })
                    }
                    Choice::Profile => {
                        // The host side first: the device side does not touch the host
                        // cache, so both see the cache state the ratio was taken in.
                        let h = self.read_host(offset, len, lambda, args)?;
                        if self.host_beats_floor(&key, len, c, &h) {
                            return Ok(single(Ran::Host, h, c));
                        }
                        let d = self.read_device(offset, len, lambda, args)?;
                        self.profiled(&key, len, c, h, d)
                    }
                }
            }
        }
    }

    /// The last decision's predictions (the trace holds it).
    fn predicted(&self) -> Option<(f64, f64)> {
        self.io
            .dispatcher()
            .trace()
            .last()
            .and_then(|d| d.predicted_ns)
    }

    /// The host's half of a profiled request's sample.
    fn host_sample(&self, key: &Key, input_bytes: u64, c: f64, h: &SideRun) -> Sample {
        Sample {
            input_bytes,
            output_bytes: h.output.len() as u64,
            cache_ratio: c,
            host_compute_ns: Some(h.cost.compute_ns),
            host_media_ns: Some(h.cost.media_ns),
            host_link_ns: Some(h.cost.link_ns),
            host_io_bytes: Some(match key.direction {
                Direction::Read => h.cost.media_bytes,
                Direction::Write => h.output.len() as u64,
            }),
            host_latency_ns: Some(h.cost.latency_ns),
            ..Sample::default()
        }
    }

    /// After a profiled request's host side: whether it beat the device's floor (its
    /// bytes at the media's and link's bandwidths), so the device side need not run
    /// (`Dispatcher::host_beats_floor`). Never without the device's performance model.
    fn host_beats_floor(&self, key: &Key, input_bytes: u64, c: f64, h: &SideRun) -> bool {
        let Some(perf) = self.io.perf.as_ref() else {
            return false;
        };
        if input_bytes == 0 {
            return false;
        }
        let per_byte = |ns: u64| ns as f64 / input_bytes as f64;
        let floor = DeviceFloor {
            s: per_byte(perf.media_ns(input_bytes)),
            d: per_byte(perf.link_ns(input_bytes)),
        };
        let sample = self.host_sample(key, input_bytes, c, h);
        self.io.dispatcher().host_beats_floor(key, &sample, floor)
    }

    /// Checks a profiled request's two answers and feeds the dispatcher.
    fn profiled(
        &self,
        key: &Key,
        input_bytes: u64,
        c: f64,
        h: SideRun,
        d: SideRun,
    ) -> Result<LambdaOutput, LambdaError> {
        if h.output != d.output {
            return Err(LambdaError::SidesDisagree {
                path: self.path.clone(),
                host_bytes: h.output.len() as u64,
                device_bytes: d.output.len() as u64,
            });
        }
        let sample = Sample {
            media_ns: Some(d.cost.media_ns),
            link_ns: Some(d.cost.link_ns),
            device_compute_ns: Some(d.cost.compute_ns),
            device_latency_ns: Some(d.cost.latency_ns),
            ..self.host_sample(key, input_bytes, c, &h)
        };
        self.io.dispatcher().record(key, sample);
        Ok(LambdaOutput {
            output: h.output,
            ran: Ran::Both,
            cache_ratio: c,
            host: Some(h.cost),
            device: Some(d.cost),
            predicted_ns: None,
        })
    }

    fn read_host(
        &self,
        offset: u64,
        len: u64,
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let (mut input, mut cost) = self.read_plain(offset, len)?;
        let perf = self
            .io
            .perf
            .as_ref()
            .expect("read_plain checked the host side");
        let (output, fuel, work) = run_host(lambda, &mut input, args, &self.io.stop)?;
        cost.fuel = fuel;
        cost.insns = work.total();
        cost.compute_ns = perf.host_work_ns(&work.0);
        Ok(SideRun { output, cost })
    }

    fn read_device(
        &self,
        offset: u64,
        len: u64,
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let out_len = args.output_size_bytes.unwrap_or(len);
        self.io.with_staging(len + out_len, |mem| {
            self.read_device_in(mem, offset, len, out_len, lambda, args)
        })
    }

    fn read_device_in(
        &self,
        mem: MemHandle,
        offset: u64,
        len: u64,
        out_len: u64,
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let client = self.io.dev.client();
        let mut cost = SideCost::default();
        let copy = client.call_ok(Op::MemCopy {
            dst: mem,
            dst_offset: 0,
            sources: vec![CopySource::File {
                path: self.path.clone(),
                offset,
                len,
            }],
        })?;
        cost.book(&copy, self.io.latency_ns(), Resource::Media);
        cost.media_bytes += len;
        let run = self.execute(lambda, args, (mem, 0, len), (mem, len, out_len))?;
        cost.book_execution(&run, self.io.latency_ns());
        cost.fuel = run.fuel_used;
        cost.insns = run.work.iter().sum();
        let n = output_len(Side::Device, &run, out_len)?;
        let output = self.read_back(mem, len, n, Some(&mut cost))?;
        Ok(SideRun { output, cost })
    }

    /// Reads `n` bytes at `offset` of `mem` in Memory Reads of at most
    /// `MEM_IO_SIZE_MAX`, booking them on `cost` when given.
    fn read_back(
        &self,
        mem: MemHandle,
        offset: u64,
        n: u64,
        mut cost: Option<&mut SideCost>,
    ) -> Result<Vec<u8>, LambdaError> {
        let client = self.io.dev.client();
        let mut out = Vec::with_capacity(n as usize);
        let mut done = 0;
        while done < n {
            let piece = (n - done).min(csx_proto::limits::MEM_IO_SIZE_MAX);
            let c = client.call_ok(Op::MemRead {
                handle: mem,
                offset: offset + done,
                len: piece,
            })?;
            if let Some(cost) = cost.as_deref_mut() {
                cost.book(&c, self.io.latency_ns(), Resource::Link);
                cost.link_bytes += piece;
            }
            out.extend_from_slice(&data_of(c, piece)?);
            done += piece;
        }
        Ok(out)
    }

    fn execute(
        &self,
        lambda: &Lambda,
        args: &LambdaArgs,
        input: (MemHandle, u64, u64),
        output: (MemHandle, u64, u64),
    ) -> Result<Execution, LambdaError> {
        let mut req = ExecuteRequest::new(lambda.pind())
            .window(input.0, input.1, input.2)
            .window(output.0, output.1, output.2)
            .cparams(args.cparam1, args.cparam2)
            .params(args.params.clone());
        if let Some(f) = args.fuel {
            req = req.fuel(f);
        }
        let stop = &self.io.stop;
        let aborted = || LambdaError::Aborted { side: Side::Device };
        if stop.is_set() {
            return Err(aborted());
        }
        let dev = self.io.dev;
        let id = dev.submit_execute(&req)?;
        let mut abort_sent = false;
        loop {
            match dev.wait_execute(id, Some(STOP_POLL)) {
                Ok(Some(run)) => return Ok(run),
                Ok(None) => {}
                Err(CallError::Aborted(_)) if abort_sent => return Err(aborted()),
                Err(e) => return Err(e.into()),
            }
            if stop.is_set() && !abort_sent {
                dev.abort(id)?;
                abort_sent = true;
            }
        }
    }

    /// Runs `lambda` over `input` and writes its output (r0 bytes) to the file at
    /// `offset`, in `mode`; afterwards the written range is durable and out of the host
    /// cache, and this handle's size and extents are current.
    pub fn write_lambda(
        &mut self,
        offset: u64,
        input: &[u8],
        lambda: &Lambda,
        args: &LambdaArgs,
        mode: Mode,
    ) -> Result<LambdaOutput, LambdaError> {
        if input.is_empty() {
            return Err(LambdaError::OutOfRange {
                path: self.path.clone(),
                offset,
                len: 0,
                size_bytes: self.size_bytes,
            });
        }
        let out = match mode {
            Mode::Host => single(
                Ran::Host,
                self.write_host(offset, input, lambda, args)?,
                0.0,
            ),
            Mode::Device => single(
                Ran::Device,
                self.write_device(offset, input, lambda, args)?,
                0.0,
            ),
            Mode::Auto => self.write_auto(offset, input, lambda, args)?,
        };
        self.refresh()?;
        if let Ok(local) = self.io.local() {
            let written = out.output.len() as u64;
            if written > 0 {
                let ranges = self.image_ranges(offset, written);
                local
                    .drop_ranges(&ranges)
                    .map_err(LambdaError::local("drop"))?;
            }
        }
        Ok(out)
    }

    /// [`Mode::Auto`]'s write: the side the dispatcher picks, or both when it
    /// profiles.
    fn write_auto(
        &mut self,
        offset: u64,
        input: &[u8],
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<LambdaOutput, LambdaError> {
        let len = input.len() as u64;
        let key = self.key(lambda, Direction::Write);
        let choice = self.io.dispatcher().decide(&key, len, 0.0);
        let predicted = self.predicted();
        Ok(match choice {
            Choice::Run(Side::Host) => LambdaOutput {
                predicted_ns: predicted,
                ..single(
                    Ran::Host,
                    self.write_host(offset, input, lambda, args)?,
                    0.0,
                )
            },
            Choice::Run(Side::Device) => LambdaOutput {
                predicted_ns: predicted,
                ..single(
                    Ran::Device,
                    self.write_device(offset, input, lambda, args)?,
                    0.0,
                )
            },
            Choice::Profile => {
                // Both sides write the same bytes to the same place; the second write is
                // the profile's cost.
                let h = self.write_host(offset, input, lambda, args)?;
                if self.host_beats_floor(&key, len, 0.0, &h) {
                    return Ok(single(Ran::Host, h, 0.0));
                }
                let d = self.write_device(offset, input, lambda, args)?;
                self.profiled(&key, len, 0.0, h, d)?
            }
        })
    }

    fn write_host(
        &self,
        offset: u64,
        input: &[u8],
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let (_, perf) = self.io.host_parts()?;
        let mut input = input.to_vec();
        let (output, fuel, work) = run_host(lambda, &mut input, args, &self.io.stop)?;
        let mut cost = SideCost {
            compute_ns: perf.host_work_ns(&work.0),
            fuel,
            insns: work.total(),
            ..SideCost::default()
        };
        let io_cost = self.write_out(offset, &output, perf)?;
        cost.media_ns += io_cost.media_ns;
        cost.link_ns += io_cost.link_ns;
        cost.latency_ns += io_cost.latency_ns;
        cost.media_bytes += io_cost.media_bytes;
        cost.link_bytes += io_cost.link_bytes;
        Ok(SideRun { output, cost })
    }

    /// Writes `data` to the file at `offset` from the host (File Write over the link,
    /// then Flush), with its modelled cost.
    fn write_out(
        &self,
        offset: u64,
        data: &[u8],
        perf: &PerfModel,
    ) -> Result<SideCost, LambdaError> {
        let mut cost = SideCost::default();
        let client = self.io.dev.client();
        for (i, piece) in data.chunks(FILE_IO_SIZE_MAX as usize).enumerate() {
            let n = piece.len() as u64;
            let c = client.call_ok(Op::FileWrite {
                path: self.path.clone(),
                offset: offset + i as u64 * FILE_IO_SIZE_MAX,
                data: piece.to_vec(),
                mode: WriteMode::Write,
            })?;
            let media = perf.media_ns(n).min(c.timing.modelled_ns);
            cost.media_ns += media;
            let latency = perf.link_latency_ns.min(c.timing.modelled_ns - media);
            cost.latency_ns += latency;
            cost.link_ns += c.timing.modelled_ns - media - latency;
            cost.media_bytes += n;
            cost.link_bytes += n;
        }
        let c = client.call_ok(Op::Flush)?;
        cost.book(&c, perf.link_latency_ns, Resource::Media);
        Ok(cost)
    }

    /// Writes `data` at `offset` from the host without a λ (λ-IO's Buffer IO write:
    /// the caller computed it natively), with the same durability and cache
    /// invalidation as [`LambdaFile::write_lambda`]; returns its modelled I/O cost.
    pub fn write_plain(&mut self, offset: u64, data: &[u8]) -> Result<SideCost, LambdaError> {
        let (_, perf) = self.io.host_parts()?;
        let cost = self.write_out(offset, data, perf)?;
        self.refresh()?;
        if !data.is_empty() {
            let ranges = self.image_ranges(offset, data.len() as u64);
            self.io
                .local()?
                .drop_ranges(&ranges)
                .map_err(LambdaError::local("drop"))?;
        }
        Ok(cost)
    }

    fn write_device(
        &self,
        offset: u64,
        input: &[u8],
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let len = input.len() as u64;
        let out_len = args.output_size_bytes.unwrap_or(len);
        self.io.with_staging(len + out_len, |mem| {
            self.write_device_in(mem, offset, input, out_len, lambda, args)
        })
    }

    fn write_device_in(
        &self,
        mem: MemHandle,
        offset: u64,
        input: &[u8],
        out_len: u64,
        lambda: &Lambda,
        args: &LambdaArgs,
    ) -> Result<SideRun, LambdaError> {
        let client = self.io.dev.client();
        let len = input.len() as u64;
        let mut cost = SideCost::default();
        for (i, piece) in input
            .chunks(csx_proto::limits::MEM_IO_SIZE_MAX as usize)
            .enumerate()
        {
            let c = client.call_ok(Op::MemWrite {
                handle: mem,
                offset: i as u64 * csx_proto::limits::MEM_IO_SIZE_MAX,
                data: piece.to_vec(),
            })?;
            cost.book(&c, self.io.latency_ns(), Resource::Link);
            cost.link_bytes += piece.len() as u64;
        }
        let run = self.execute(lambda, args, (mem, 0, len), (mem, len, out_len))?;
        cost.book_execution(&run, self.io.latency_ns());
        cost.fuel = run.fuel_used;
        cost.insns = run.work.iter().sum();
        let n = output_len(Side::Device, &run, out_len)?;
        if n > 0 {
            let c = client.call_ok(Op::FileWriteFromMem {
                path: self.path.clone(),
                offset,
                src: MemRange {
                    handle: mem,
                    offset: len,
                    len: n,
                },
            })?;
            cost.book(&c, self.io.latency_ns(), Resource::Media);
            cost.media_bytes += n;
        }
        let c = client.call_ok(Op::Flush)?;
        cost.book(&c, self.io.latency_ns(), Resource::Media);
        // The answer is what the device wrote; read it back only for the caller (not
        // part of the modelled cost: a λ-write returns no data).
        let output = self.read_back(mem, len, n, None)?;
        Ok(SideRun { output, cost })
    }
}

fn single(ran: Ran, run: SideRun, c: f64) -> LambdaOutput {
    let (host, device) = match ran {
        Ran::Host => (Some(run.cost), None),
        _ => (None, Some(run.cost)),
    };
    LambdaOutput {
        output: run.output,
        ran,
        cache_ratio: c,
        host,
        device,
        predicted_ns: None,
    }
}

/// r0 of a finished run as an output length, or the run's failure.
fn output_len(side: Side, run: &Execution, out_len: u64) -> Result<u64, LambdaError> {
    if let Some(t) = &run.trap {
        return Err(LambdaError::Trap {
            side,
            trap: t.to_string(),
        });
    }
    let r0 = run.r0_signed();
    if r0 < 0 {
        return Err(LambdaError::Failed {
            side,
            code: r0,
            name: csx_proto::errno::name(r0).to_string(),
        });
    }
    if r0 as u64 > out_len {
        return Err(LambdaError::OutputTooLong {
            side,
            r0: r0 as u64,
            window_bytes: out_len,
        });
    }
    Ok(r0 as u64)
}

fn data_of(c: Completion, n: u64) -> Result<Vec<u8>, LambdaError> {
    match c.reply {
        Reply::Data(d) if d.len() as u64 == n => Ok(d),
        _ => Err(LambdaError::Device(csx_host::CallError::UnexpectedReply {
            op: "mem-read",
            expected: "data of the length asked",
            found: "other".to_string(),
        })),
    }
}

/// Runs `lambda` on the host over `input`; the output bytes, the fuel used and the work
/// executed.
fn run_host(
    lambda: &Lambda,
    input: &mut [u8],
    args: &LambdaArgs,
    stop: &StopFlag,
) -> Result<(Vec<u8>, u64, WorkCounts), LambdaError> {
    if stop.is_set() {
        return Err(LambdaError::Aborted { side: Side::Host });
    }
    let out_len = args.output_size_bytes.unwrap_or(input.len() as u64);
    let mut output = vec![0u8; out_len as usize];
    let (outcome, work) = lambda.run_host(input, &mut output, args, stop);
    if let Err(csx_ebpf::trap::Trap {
        kind: csx_ebpf::trap::TrapKind::Stopped { .. },
        ..
    }) = outcome.result
    {
        return Err(LambdaError::Aborted { side: Side::Host });
    }
    let run = Execution {
        r0: outcome.result.as_ref().copied().unwrap_or(0),
        status: if outcome.result.is_ok() {
            csx_proto::Status::Success
        } else {
            csx_proto::Status::Trap
        },
        trap: outcome
            .result
            .as_ref()
            .err()
            .map(csx_device::offload::wire_trap),
        timing: csx_proto::Timing::default(),
        detail: None,
        fuel_used: outcome.fuel_used,
        trace: Vec::new(),
        work: work.0.to_vec(),
    };
    let n = output_len(Side::Host, &run, out_len)?;
    output.truncate(n as usize);
    Ok((output, outcome.fuel_used, work))
}
