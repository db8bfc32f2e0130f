//! The device performance model: how long a command would take on the device being
//! emulated, as opposed to on this host.
//!
//! csx runs the device on the host's own CPU, with the backing image in the host's
//! memory, so without a model every host/device comparison is meaningless. A
//! [`PerfModel`] describes the emulated hardware (the host link, the media, the compute
//! speed relative to the host) and assigns every command a modelled duration:
//!
//! ```text
//!   command                  modelled ns
//!   ----------------------   ------------------------------------------------------
//!   every command            link latency (doorbell + completion round trip)
//!   Memory Write / Read      + bytes over the link
//!   Load Program             + image chunk over the link
//!   Memory Copy              + file and NVM source bytes over the media
//!   File Write / Read        + bytes over the link + bytes over the media
//!   File Write From Memory   + bytes over the media
//!   Execute                  + Σ over instruction classes of instructions executed
//!                              × the device core's ps per instruction of the class
//! ```
//!
//! Execute's compute comes from the work the run did: the instructions it executed,
//! counted per canonical basic block by both engine kinds alike (`csx_ebpf::count`),
//! by class (alu64, alu32, mul, div, load, store, atomic, jump, jump32, call), each
//! class priced by the profile's device core ([`PerfModel::device_ps_per_insn`]). The
//! host side of a comparison (λ-IO, the demo) prices the same counts with the host's
//! core ([`PerfModel::host_ps_per_insn`]). Fuel stays the safety budget only; a
//! completion without counts falls back to fuel × host ps per fuel × compute scale.
//!
//! Counting is per device ([`PerfModel::counts_work`], `count_work` in `device.json`):
//! by default on only where the profile prices instructions (`lambda-io`, `daisy`),
//! since a counted run is slower (the interpreter runs unfused, the JIT its counting
//! variant); an `unthrottled` device runs uncounted code and prices compute from fuel.
//!
//! Two uses, one number:
//! - **virtual clock**: the modelled duration goes into `Completion::timing.modelled_ns`.
//!   It is computed from the command, the bytes it moved and the fuel it used, never from
//!   a measured time, so it is the same on every run and on every machine.
//! - **real time**: when the model throttles, the worker holds the completion until the
//!   command has taken at least its modelled duration (and an execution at least its
//!   measured run time × the compute scale), so wall-clock comparisons see the device
//!   too.
//!
//! Invariants: all arithmetic is integer and saturating (no float, so no platform
//! rounding differences); a bandwidth of 0 means "unlimited" and costs nothing.
//!
//! Not modelled (documented limits): contention between commands for the link or the
//! media (each command is costed alone, as λ-IO costs one request); the file I/O a
//! program does through registered functions during an Execute (its bytes are not in the
//! completion; it runs at host speed); device memory bandwidth for Memory Fill and
//! memory-to-memory copies.

use std::time::{Duration, Instant};

use csx_ebpf::count::{InsnClass, CLASS_COUNT};
use csx_proto::{Completion, CopySource, Op, Reply, Status};

/// Why a performance model or a profile name is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PerfError {
    #[error("unknown performance profile {name:?}, known: unthrottled, lambda-io, daisy")]
    UnknownProfile { name: String },
    #[error("{field} is {value}, must be between {min} and {max}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}

/// Bytes per second in one GB/s (decimal, as the papers quote bandwidths).
pub const BYTES_PER_GB: u64 = 1_000_000_000;

/// Largest bandwidth a model accepts: 1 TB/s, beyond any host link or media and far
/// below where the nanosecond arithmetic could overflow.
pub const BANDWIDTH_MAX_BYTES_PER_SEC: u64 = 1000 * BYTES_PER_GB;

/// Largest link latency: 1 s; a latency beyond that is a typo, not a device.
pub const LINK_LATENCY_MAX_NS: u64 = 1_000_000_000;

/// Compute scales are in thousandths: 1000 means "as fast as the host".
pub const COMPUTE_SCALE_UNIT: u32 = 1000;

/// Largest compute scale: a device 1000× slower than the host (an 87.5 MHz ARM7 next to
/// a modern core is about that).
pub const COMPUTE_SCALE_MAX: u32 = 1000 * COMPUTE_SCALE_UNIT;

/// Smallest compute scale: a device 100× faster than the host (an FPGA pipeline).
pub const COMPUTE_SCALE_MIN: u32 = COMPUTE_SCALE_UNIT / 100;

/// Host time per unit of fuel (about one eBPF instruction), in picoseconds: 250 ps, that
/// is 4 JIT-compiled instructions per ns, what the λ-IO host (a 3.6 GHz Core i7-7700,
/// about 1 instruction per cycle on JIT-compiled eBPF) runs. A documented constant rather
/// than a calibration on this machine, so modelled times do not depend on it.
pub const HOST_PS_PER_FUEL_DEFAULT: u64 = 250;

/// Largest host time per fuel unit: 1 µs.
pub const HOST_PS_PER_FUEL_MAX: u64 = 1_000_000;

/// Largest time per executed instruction of one class, host or device: 1 µs.
pub const PS_PER_INSN_MAX: u64 = 1_000_000;

/// Per instruction class (`csx_ebpf::count::InsnClass` order), picoseconds per executed
/// instruction.
pub type ClassCosts = [u64; CLASS_COUNT];

/// The λ-IO device core's time per executed instruction of a 64-bit class, ps: 742,
/// calibrated on λ-IO's Table 4 (FAST'23 §5.5, sBPF rows): Stats64's compute took 2.94 s
/// on the device against 0.99 s in the kernel, 2.97×, and the host core runs
/// [`HOST_PS_PER_FUEL_DEFAULT`] (250 ps) per instruction: 2.97 × 250 = 742 ps, about
/// 1.1 cycles of the Daisy's 1.5 GHz Cortex-A53 per instruction. Both sides run the same
/// bytecode, so the ratio is the cores' (per core: λ-IO's device and host compute times
/// are both sums over requests).
pub const DEVICE_PS_PER_INSN_LAMBDA_IO: u64 = 742;

/// The λ-IO device core's time per executed 32-bit instruction (classes alu32 and
/// jump32), ps: three 64-bit instructions' worth, 3 × 742 = 2226. λ-IO explains its
/// Stats32 result by the zero-extension of 32-bit values (§5.2: "eBPF clears the upper
/// 32 bits with shift pairs"): on its device each 32-bit operation costs the operation and
/// a pair of shifts, which the host's out-of-order core hides. Checked against Table 4:
/// Stats32's compute took 10.27 s on the device against 1.60 s in the kernel, 6.42×; the
/// SDK's stats32 (per input byte: 2.0 32-bit and 1.5 other instructions executed) costs
/// the device 6.36× the host's compute per byte at these costs (the test
/// `lambda_io_costs_reproduce_table_4_compute_ratios` in csx-bench holds it within 3%).
pub const DEVICE_PS_PER_INSN32_LAMBDA_IO: u64 = 3 * DEVICE_PS_PER_INSN_LAMBDA_IO;

/// Per-class device costs of the λ-IO board's core (the Daisy OpenSSD's Cortex-A53):
/// 64-bit classes at [`DEVICE_PS_PER_INSN_LAMBDA_IO`], 32-bit at
/// [`DEVICE_PS_PER_INSN32_LAMBDA_IO`].
pub fn device_costs_lambda_io() -> ClassCosts {
    let mut c = [DEVICE_PS_PER_INSN_LAMBDA_IO; CLASS_COUNT];
    c[InsnClass::Alu32 as usize] = DEVICE_PS_PER_INSN32_LAMBDA_IO;
    c[InsnClass::Jump32 as usize] = DEVICE_PS_PER_INSN32_LAMBDA_IO;
    c
}

/// The host kernel's I/O stack (page cache, file system, block layer, driver, copy to
/// user) per byte a host reads from the device, beyond the link: 194 ps, λ-IO's own
/// measurement (FAST'23 Table 4, λ-IO Kernel, Stats64 under sBPF: 9.06 s in all, 0.99 s
/// of compute, so 8.07 s of I/O for the 16 GB dataset, against 16 GB / 3.22 GB/s = 4.97 s
/// over the link alone: 3.10 s more, 0.194 ns per byte). It is why λ-IO's Buffer IO spent
/// over 92% of its time in I/O (§5.2) and the host reads at about 1.98 GB/s over a
/// 3.22 GB/s link. The device's own media reads do not pay it.
pub const HOST_STACK_PS_PER_BYTE_LAMBDA_IO: u64 = 194;

/// Largest host I/O stack cost: 1 µs per byte (1 MB/s), far beyond any real stack.
pub const HOST_STACK_PS_PER_BYTE_MAX: u64 = 1_000_000;

/// The named profiles, in the order `csx device init --profile` lists them.
pub const PROFILE_NAMES: [&str; 3] = ["unthrottled", "lambda-io", "daisy"];

/// The emulated device's speeds; persisted in `device.json` with the rest of the
/// [`crate::DeviceConfig`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PerfModel {
    /// The profile these values came from (`custom` after an override); informational.
    pub profile: String,
    /// Whether commands take at least their modelled time in real time.
    pub throttle: bool,
    /// Host ↔ device bandwidth, bytes per second; 0: unlimited.
    pub link_bytes_per_sec: u64,
    /// Fixed cost of every command on the link, ns.
    pub link_latency_ns: u64,
    /// Storage media → device memory bandwidth, bytes per second; 0: unlimited.
    pub media_bytes_per_sec: u64,
    /// Device compute time relative to the host's, in thousandths (2400: the device
    /// takes 2.4× as long as the host for the same program and input).
    pub compute_scale_milli: u32,
    /// Host time per fuel unit, picoseconds (see [`HOST_PS_PER_FUEL_DEFAULT`]).
    pub host_ps_per_fuel: u64,
    /// The device's cores (execution engines) in this profile; `None`: one per host core.
    pub engines: Option<u32>,
    /// Host time per byte a host reads from the device beyond the link: its kernel's I/O
    /// stack (see [`HOST_STACK_PS_PER_BYTE_LAMBDA_IO`]), picoseconds; 0: free. Only host-side
    /// models use it (λ-IO's host reads, the demo's host side); no command pays it.
    #[serde(default)]
    pub host_stack_ps_per_byte: u64,
    /// Device ↔ device (peer) link bandwidth, bytes per second; 0: unlimited. No
    /// command of one device pays it; csx-array's model prices member-to-member
    /// transfers with it (`LinkModel::from_perf`).
    #[serde(default)]
    pub d2d_bytes_per_sec: u64,
    /// Fixed cost of a transfer on the device-to-device link, ns.
    #[serde(default)]
    pub d2d_latency_ns: u64,
    /// The host core's time per executed instruction, by class ([`ClassCosts`]); all
    /// 0 (an older `device.json`): `host_ps_per_fuel` for every class.
    #[serde(default)]
    pub host_ps_per_insn: ClassCosts,
    /// The device core's time per executed instruction, by class; all 0: the host's
    /// costs × the compute scale.
    #[serde(default)]
    pub device_ps_per_insn: ClassCosts,
    /// Whether every execution counts the instructions it runs (per basic block, see
    /// `csx_ebpf::count`), so that its modelled compute comes from its work. Counting
    /// runs slower code (the interpreter's unfused loop, the JIT's counting variant), so
    /// absent (`null`), it is on only where the profile models compute from work: a
    /// non-zero `device_ps_per_insn` (`lambda-io`, `daisy`); `unthrottled` does not
    /// count and prices compute from fuel. `true`/`false` force it.
    #[serde(default)]
    pub count_work: Option<bool>,
}

impl Default for PerfModel {
    fn default() -> Self {
        PerfModel::unthrottled()
    }
}

impl PerfModel {
    /// No delays: the device runs at host speed with an unlimited link and media; the
    /// virtual clock still counts compute (at scale 1), so modelled times stay
    /// comparable between runs.
    pub fn unthrottled() -> PerfModel {
        PerfModel {
            profile: "unthrottled".to_string(),
            throttle: false,
            link_bytes_per_sec: 0,
            link_latency_ns: 0,
            media_bytes_per_sec: 0,
            compute_scale_milli: COMPUTE_SCALE_UNIT,
            host_ps_per_fuel: HOST_PS_PER_FUEL_DEFAULT,
            engines: None,
            host_stack_ps_per_byte: 0,
            d2d_bytes_per_sec: 0,
            d2d_latency_ns: 0,
            // Every class at `host_ps_per_fuel`.
            host_ps_per_insn: [0; CLASS_COUNT],
            // At host speed: the host's costs at scale 1.
            device_ps_per_insn: [0; CLASS_COUNT],
            count_work: None,
        }
    }

    /// The λ-IO testbed (FAST'23, §5.1, Table 2): a Daisy OpenSSD whose media → device
    /// memory bandwidth is 3.52 GB/s and device memory → host bandwidth 3.22 GB/s, with 4
    /// ARM cores. The paper gives no latency; we take the Daisy's measured DMA floor
    /// (below).
    ///
    /// Compute: the device core's cost per executed instruction by class
    /// ([`device_costs_lambda_io`]), calibrated on the paper's Table 4 (§5.5: Stats64's
    /// compute 2.97× the kernel's on the device, Stats32's 6.42×) against a host core at
    /// [`HOST_PS_PER_FUEL_DEFAULT`] per instruction (a 3.6 GHz Core i7-7700 running
    /// JIT-compiled eBPF at about one instruction per cycle). `compute_scale_milli` (1.6)
    /// is what the model used before it counted executed instructions; it now only sets
    /// the real-time floor of a throttled execution and prices completions without counts.
    pub fn lambda_io() -> PerfModel {
        PerfModel {
            profile: "lambda-io".to_string(),
            throttle: true,
            link_bytes_per_sec: 3_220_000_000,
            link_latency_ns: 10_000,
            media_bytes_per_sec: 3_520_000_000,
            compute_scale_milli: 1600,
            host_ps_per_fuel: HOST_PS_PER_FUEL_DEFAULT,
            engines: Some(4),
            host_stack_ps_per_byte: HOST_STACK_PS_PER_BYTE_LAMBDA_IO,
            // One device in the paper: no peer link is measured, so none is modelled.
            d2d_bytes_per_sec: 0,
            d2d_latency_ns: 0,
            // Every class at `host_ps_per_fuel`.
            host_ps_per_insn: [0; CLASS_COUNT],
            device_ps_per_insn: device_costs_lambda_io(),
            count_work: None,
        }
    }

    /// The Delilah testbed (Delilah thesis, §4 and §11.1): a Daisy OpenSSD with four
    /// Cortex-A53 cores at 1.5 GHz; single-channel DMA between host memory and device memory
    /// peaks at 2.65 GB/s (10 MB reads, Table 11.2) with a 7–16 µs floor per transfer
    /// (10 µs here). The thesis measures no media bandwidth; the same board's media →
    /// device memory figure from λ-IO (3.52 GB/s) stands in. Compute: the same board's
    /// cores as λ-IO's, so λ-IO's per-class calibration ([`device_costs_lambda_io`]) carries
    /// over (the thesis gives no per-program ratio to calibrate on). Compute scale 2.4,
    /// the clock ratio of a 3.6 GHz host core to the Daisy's 1.5 GHz Cortex-A53 cores,
    /// only sets the real-time floor of a throttled execution.
    pub fn daisy() -> PerfModel {
        PerfModel {
            profile: "daisy".to_string(),
            throttle: true,
            link_bytes_per_sec: 2_650_000_000,
            link_latency_ns: 10_000,
            media_bytes_per_sec: 3_520_000_000,
            compute_scale_milli: 2400,
            host_ps_per_fuel: HOST_PS_PER_FUEL_DEFAULT,
            engines: Some(4),
            // The same board behind a Linux host: λ-IO's measured stack stands in.
            host_stack_ps_per_byte: HOST_STACK_PS_PER_BYTE_LAMBDA_IO,
            // One device in the paper: no peer link is measured, so none is modelled.
            d2d_bytes_per_sec: 0,
            d2d_latency_ns: 0,
            // Every class at `host_ps_per_fuel`.
            host_ps_per_insn: [0; CLASS_COUNT],
            // The same board and cores as λ-IO's: its calibration carries over.
            device_ps_per_insn: device_costs_lambda_io(),
            count_work: None,
        }
    }

    /// Whether executions count their instructions: `count_work` when set, else whether
    /// the profile prices device compute per executed instruction.
    pub fn counts_work(&self) -> bool {
        self.count_work
            .unwrap_or_else(|| self.device_ps_per_insn.iter().any(|&ps| ps != 0))
    }

    /// The named profile (one of [`PROFILE_NAMES`]).
    pub fn profile(name: &str) -> Result<PerfModel, PerfError> {
        match name {
            "unthrottled" => Ok(PerfModel::unthrottled()),
            "lambda-io" => Ok(PerfModel::lambda_io()),
            "daisy" => Ok(PerfModel::daisy()),
            _ => Err(PerfError::UnknownProfile {
                name: name.to_string(),
            }),
        }
    }

    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<(), PerfError> {
        let range = |field, value: u64, min, max| {
            if value < min || value > max {
                Err(PerfError::OutOfRange {
                    field,
                    value,
                    min,
                    max,
                })
            } else {
                Ok(())
            }
        };
        range(
            "link_bytes_per_sec",
            self.link_bytes_per_sec,
            0,
            BANDWIDTH_MAX_BYTES_PER_SEC,
        )?;
        range(
            "media_bytes_per_sec",
            self.media_bytes_per_sec,
            0,
            BANDWIDTH_MAX_BYTES_PER_SEC,
        )?;
        range(
            "link_latency_ns",
            self.link_latency_ns,
            0,
            LINK_LATENCY_MAX_NS,
        )?;
        range(
            "d2d_bytes_per_sec",
            self.d2d_bytes_per_sec,
            0,
            BANDWIDTH_MAX_BYTES_PER_SEC,
        )?;
        range(
            "d2d_latency_ns",
            self.d2d_latency_ns,
            0,
            LINK_LATENCY_MAX_NS,
        )?;
        range(
            "compute_scale_milli",
            u64::from(self.compute_scale_milli),
            u64::from(COMPUTE_SCALE_MIN),
            u64::from(COMPUTE_SCALE_MAX),
        )?;
        range(
            "host_ps_per_fuel",
            self.host_ps_per_fuel,
            1,
            HOST_PS_PER_FUEL_MAX,
        )?;
        range(
            "host_stack_ps_per_byte",
            self.host_stack_ps_per_byte,
            0,
            HOST_STACK_PS_PER_BYTE_MAX,
        )?;
        for ps in self.host_ps_per_insn {
            range("host_ps_per_insn", ps, 0, PS_PER_INSN_MAX)?;
        }
        for ps in self.device_ps_per_insn {
            range("device_ps_per_insn", ps, 0, PS_PER_INSN_MAX)?;
        }
        Ok(())
    }

    /// Nanoseconds to move `bytes` at `bytes_per_sec` (0: unlimited), rounded up so any
    /// non-empty transfer over a limited path costs something.
    pub fn bytes_ns(bytes: u64, bytes_per_sec: u64) -> u64 {
        if bytes_per_sec == 0 || bytes == 0 {
            return 0;
        }
        let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(bytes_per_sec));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Host ↔ device transfer time for `bytes`.
    pub fn link_ns(&self, bytes: u64) -> u64 {
        PerfModel::bytes_ns(bytes, self.link_bytes_per_sec)
    }

    /// Media → device memory transfer time for `bytes`.
    pub fn media_ns(&self, bytes: u64) -> u64 {
        PerfModel::bytes_ns(bytes, self.media_bytes_per_sec)
    }

    /// The host kernel's I/O stack time for `bytes` a host reads from the device.
    pub fn host_stack_ns(&self, bytes: u64) -> u64 {
        let ps = u128::from(bytes) * u128::from(self.host_stack_ps_per_byte);
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }

    /// Host compute time for a run that used `fuel`.
    pub fn host_compute_ns(&self, fuel: u64) -> u64 {
        let ps = u128::from(fuel) * u128::from(self.host_ps_per_fuel);
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }

    /// The host core's ps per executed instruction by class (see the field's doc).
    pub fn host_costs(&self) -> ClassCosts {
        if self.host_ps_per_insn.iter().all(|&c| c == 0) {
            [self.host_ps_per_fuel; CLASS_COUNT]
        } else {
            self.host_ps_per_insn
        }
    }

    /// The device core's ps per executed instruction by class (see the field's doc).
    pub fn device_costs(&self) -> ClassCosts {
        if self.device_ps_per_insn.iter().all(|&c| c == 0) {
            self.host_costs().map(|ps| {
                let scaled = u128::from(ps) * u128::from(self.compute_scale_milli)
                    / u128::from(COMPUTE_SCALE_UNIT);
                u64::try_from(scaled).unwrap_or(u64::MAX)
            })
        } else {
            self.device_ps_per_insn
        }
    }

    /// Time for `work` (instructions per class, `ExecuteInfo::work` order; extra classes
    /// cost nothing) at `costs`.
    pub fn work_ns(costs: &ClassCosts, work: &[u64]) -> u64 {
        let ps: u128 = work
            .iter()
            .zip(costs)
            .map(|(&n, &c)| u128::from(n) * u128::from(c))
            .sum();
        u64::try_from(ps / 1000).unwrap_or(u64::MAX)
    }

    /// Host compute time for a run that executed `work`.
    pub fn host_work_ns(&self, work: &[u64]) -> u64 {
        PerfModel::work_ns(&self.host_costs(), work)
    }

    /// Device compute time for a run that executed `work`.
    pub fn device_work_ns(&self, work: &[u64]) -> u64 {
        PerfModel::work_ns(&self.device_costs(), work)
    }

    /// Device compute time for a run that used `fuel` (the fallback without counts).
    pub fn device_compute_ns(&self, fuel: u64) -> u64 {
        self.scale_ns(self.host_compute_ns(fuel))
    }

    /// `host_ns` scaled to the device's compute speed.
    pub fn scale_ns(&self, host_ns: u64) -> u64 {
        let ns = u128::from(host_ns) * u128::from(self.compute_scale_milli)
            / u128::from(COMPUTE_SCALE_UNIT);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The modelled duration of `op`, which completed as `c` (see the module table).
    /// Failed commands cost the latency only: what they moved is not known.
    pub fn modelled_ns(&self, op: &Op, c: &Completion) -> u64 {
        let moved = match (op, &c.reply) {
            (Op::Execute { .. }, Reply::Execute(info))
                if matches!(c.status, Status::Success | Status::Trap) =>
            {
                if info.work.is_empty() {
                    self.device_compute_ns(info.fuel_used)
                } else {
                    self.device_work_ns(&info.work)
                }
            }
            _ if c.status != Status::Success => 0,
            (Op::MemWrite { data, .. }, _) => self.link_ns(data.len() as u64),
            (Op::LoadProgram { data, .. }, _) => self.link_ns(data.len() as u64),
            (Op::MemRead { .. }, Reply::Data(d)) => self.link_ns(d.len() as u64),
            (Op::MemCopy { sources, .. }, reply) => {
                let storage: u64 = sources
                    .iter()
                    .filter(|s| !matches!(s, CopySource::Mem { .. }))
                    .map(CopySource::len)
                    .sum();
                // Bytes served from resident memory do not touch the media.
                let resident = match reply {
                    Reply::Copied { resident_bytes } => *resident_bytes,
                    _ => 0,
                };
                self.media_ns(storage.saturating_sub(resident))
            }
            (Op::FileWrite { data, .. }, _) => {
                let n = data.len() as u64;
                self.link_ns(n).saturating_add(self.media_ns(n))
            }
            (Op::FileRead { .. }, Reply::Data(d)) => {
                let n = d.len() as u64;
                self.link_ns(n).saturating_add(self.media_ns(n))
            }
            (Op::FileWriteFromMem { src, .. }, _) => self.media_ns(src.len),
            _ => 0,
        };
        self.link_latency_ns.saturating_add(moved)
    }

    /// The real-time floor of `op`: its modelled duration, and for an execution that ran
    /// to its end (returned or trapped) at least its measured run time × the compute
    /// scale (the program may run slower here than the fuel constant assumes). The run
    /// time is the run's wall (`execute_ns`) or the worker thread's CPU time for the
    /// command (`cpu_ns`), whichever is less: with more engines than host cores a run's
    /// wall also counts its waits for a core, which a device's own cores do not have.
    /// An execution stopped by an abort or its time limit is not held back.
    pub fn floor_ns(&self, op: &Op, c: &Completion, modelled_ns: u64, cpu_ns: u64) -> u64 {
        match op {
            Op::Execute { .. } if matches!(c.status, Status::Success | Status::Trap) => {
                modelled_ns.max(self.scale_ns(c.timing.execute_ns.min(cpu_ns)))
            }
            _ => modelled_ns,
        }
    }

    /// Stamps `c` with its modelled duration and, when throttling, waits until the
    /// command has taken its real-time floor since `started` (`cpu_ns`: the CPU time the
    /// worker thread spent on it, `u64::MAX` when not measured). The device runtime calls
    /// this for every command before posting its completion.
    pub fn apply(&self, op: &Op, c: &mut Completion, started: Instant, cpu_ns: u64) {
        let modelled = self.modelled_ns(op, c);
        c.timing.modelled_ns = modelled;
        if !self.throttle {
            return;
        }
        let floor = Duration::from_nanos(self.floor_ns(op, c, modelled, cpu_ns));
        let elapsed = started.elapsed();
        if let Some(rest) = floor.checked_sub(elapsed) {
            // `sleep` never returns early, so the floor holds; its overshoot is the
            // scheduler's and only makes the command slower.
            std::thread::sleep(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_proto::{CommandId, ExecuteInfo, MemHandle};

    #[test]
    fn profiles_are_valid_and_named() {
        for name in PROFILE_NAMES {
            let p = PerfModel::profile(name).unwrap();
            assert_eq!(p.profile, name);
            p.validate().unwrap();
        }
        assert!(matches!(
            PerfModel::profile("fast"),
            Err(PerfError::UnknownProfile { .. })
        ));
        let bad = PerfModel {
            compute_scale_milli: 0,
            ..PerfModel::lambda_io()
        };
        assert!(matches!(
            bad.validate(),
            Err(PerfError::OutOfRange {
                field: "compute_scale_milli",
                ..
            })
        ));
    }

    #[test]
    fn bytes_cost_rounds_up_and_unlimited_is_free() {
        assert_eq!(PerfModel::bytes_ns(1, BYTES_PER_GB), 1);
        assert_eq!(
            PerfModel::bytes_ns(3_220_000_000, 3_220_000_000),
            1_000_000_000
        );
        assert_eq!(PerfModel::bytes_ns(1 << 40, 0), 0);
        assert_eq!(PerfModel::bytes_ns(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn commands_are_costed_by_what_they_move() {
        let m = PerfModel::lambda_io();
        let mut c = Completion::new(CommandId(1), Status::Success);
        let write = Op::MemWrite {
            handle: MemHandle(1),
            offset: 0,
            data: vec![0; 3_220_000],
        };
        assert_eq!(m.modelled_ns(&write, &c), 10_000 + 1_000_000);
        c.reply = Reply::Execute(ExecuteInfo {
            fuel_used: 4_000,
            work: Vec::new(),
            trace: Vec::new(),
        });
        let exec = Op::Execute {
            pind: csx_proto::ProgramIndex(0),
            windows: csx_proto::Windows::Inline(Vec::new()),
            cparam1: 0,
            cparam2: 0,
            params: Vec::new(),
            fuel: None,
            time_limit_ms: None,
            generation: None,
        };
        // 4000 fuel × 250 ps = 1 µs on the host, 1.6 µs on the device.
        assert_eq!(m.modelled_ns(&exec, &c), 10_000 + 1_600);
        let failed = Completion::new(CommandId(2), Status::OutOfRange);
        assert_eq!(m.modelled_ns(&write, &failed), 10_000);
        // λ-IO's host reads 16 GB in 8.07 s of I/O: link 4.97 s plus the stack's 3.10 s.
        let gb16 = 16 * BYTES_PER_GB;
        let io_s = (m.link_ns(gb16) + m.host_stack_ns(gb16)) as f64 / 1e9;
        assert!((io_s - 8.07).abs() < 0.01, "{io_s}");
        // No command pays it, and a device.json without the field has none.
        assert_eq!(m.modelled_ns(&write, &c), 10_000 + 1_000_000);
        let old: PerfModel = serde_json::from_str(
            r#"{"profile":"x","throttle":false,"link_bytes_per_sec":0,"link_latency_ns":0,
                "media_bytes_per_sec":0,"compute_scale_milli":1000,"host_ps_per_fuel":250,
                "engines":null}"#,
        )
        .unwrap();
        assert_eq!(old.host_stack_ns(gb16), 0);
        // A run's floor is at least its run time scaled, unless it was stopped.
        c.timing.execute_ns = 1_000_000;
        let scaled = m.scale_ns(1_000_000);
        assert!(scaled > 11_600);
        assert_eq!(m.floor_ns(&exec, &c, 11_600, u64::MAX), scaled);
        // A run that waited for a host core is floored at its CPU time, not its wall.
        assert_eq!(m.floor_ns(&exec, &c, 11_600, 400_000), m.scale_ns(400_000));
        assert_eq!(m.floor_ns(&exec, &c, 11_600, 1), 11_600);
        for stopped in [Status::Aborted, Status::TimeLimitExceeded] {
            c.status = stopped;
            assert_eq!(
                m.floor_ns(&exec, &c, 10_000, u64::MAX),
                10_000,
                "{stopped:?}"
            );
        }
        // With counts, an execution is priced from its work, per class, not its fuel.
        c.status = Status::Success;
        let mut work = vec![0u64; CLASS_COUNT];
        work[InsnClass::Alu64 as usize] = 1000;
        work[InsnClass::Alu32 as usize] = 100;
        c.reply = Reply::Execute(ExecuteInfo {
            fuel_used: 4_000,
            trace: Vec::new(),
            work: work.clone(),
        });
        let device = 1000 * DEVICE_PS_PER_INSN_LAMBDA_IO + 100 * DEVICE_PS_PER_INSN32_LAMBDA_IO;
        assert_eq!(m.modelled_ns(&exec, &c), 10_000 + device / 1000);
        assert_eq!(m.host_work_ns(&work), 1100 * 250 / 1000);
        // A trapped run is priced the same way; a failed one costs the latency only.
        c.status = Status::Trap;
        assert_eq!(m.modelled_ns(&exec, &c), 10_000 + device / 1000);
    }

    #[test]
    fn class_costs_default_from_fuel_cost_and_scale() {
        // A device.json from before per-class costs: every class at host_ps_per_fuel,
        // the device's scaled.
        let old: PerfModel = serde_json::from_str(
            r#"{"profile":"x","throttle":false,"link_bytes_per_sec":0,"link_latency_ns":0,
                "media_bytes_per_sec":0,"compute_scale_milli":2000,"host_ps_per_fuel":300,
                "engines":null}"#,
        )
        .unwrap();
        old.validate().unwrap();
        assert_eq!(old.host_costs(), [300; CLASS_COUNT]);
        assert_eq!(old.device_costs(), [600; CLASS_COUNT]);
        assert_eq!(old.device_work_ns(&[10; CLASS_COUNT]), 60);
        // It prices compute from fuel, so its executions do not count.
        assert_eq!(old.count_work, None);
        assert!(!old.counts_work());
        let forced: PerfModel = serde_json::from_str(
            r#"{"profile":"x","throttle":false,"link_bytes_per_sec":0,"link_latency_ns":0,
                "media_bytes_per_sec":0,"compute_scale_milli":2000,"host_ps_per_fuel":300,
                "engines":null,"count_work":true}"#,
        )
        .unwrap();
        assert!(forced.counts_work());
        // Counting is on by default only where the profile prices work per instruction.
        assert!(PerfModel::lambda_io().counts_work());
        assert!(PerfModel::daisy().counts_work());
        assert!(!PerfModel::unthrottled().counts_work());
        let off = PerfModel {
            count_work: Some(false),
            ..PerfModel::lambda_io()
        };
        assert!(!off.counts_work());
        // The named profiles: λ-IO's board prices 32-bit work higher, the host does not.
        let l = PerfModel::lambda_io();
        let d = l.device_costs();
        assert!(d[InsnClass::Alu32 as usize] > d[InsnClass::Alu64 as usize]);
        assert_eq!(l.host_costs(), [HOST_PS_PER_FUEL_DEFAULT; CLASS_COUNT]);
        assert_eq!(PerfModel::daisy().device_costs(), d);
        assert_eq!(
            PerfModel::unthrottled().device_costs(),
            [HOST_PS_PER_FUEL_DEFAULT; CLASS_COUNT]
        );
        let bad = PerfModel {
            device_ps_per_insn: [PS_PER_INSN_MAX + 1; CLASS_COUNT],
            ..PerfModel::lambda_io()
        };
        assert!(matches!(
            bad.validate(),
            Err(PerfError::OutOfRange {
                field: "device_ps_per_insn",
                ..
            })
        ));
    }
}
