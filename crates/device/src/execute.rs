//! Execute Program: from a command to a run of the program and its completion.
//!
//! The program's view of the device is the program ABI ([`csx_proto::abi`]: entry
//! registers, region map, `struct csx_args`); this module maps it onto the VM's regions
//! ([`run_on_windows`]), and the device and the host side of λ-IO both run programs
//! through it.
//!
//! The path, narrated in [`Shared::execute`]: resolve the program → resolve the windows
//! (range set or inline) → check them → lease their SLM bytes → build the argument block
//! → map args, state and windows → run → post r0, the trap, the first function failure,
//! the trace and the timing.
//!
//! A run carries a stop flag ([`StopFlag`]) the VM looks at where it charges fuel. The
//! device sets it for an Abort of the command, for the pair closing, at the run's time
//! limit (the watchdog) and at device close ([`StopReason`]); a run stopped so
//! completes with [`Status::Aborted`] or [`Status::TimeLimitExceeded`], its detail
//! naming the cause (and the limit), the pc and the fuel used. A flag set before the run
//! begins means it never runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csx_ebpf::count::{ExecCounts, WorkCounts};
use csx_ebpf::engine::{Engine, RunOptions, RunOutcome, StopFlag};
use csx_ebpf::helper::HelperHost;
use csx_ebpf::limits::FUEL_DEFAULT;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::trap::{Trap, TrapKind};
use csx_proto::abi;
use csx_proto::limits::WINDOWS_MAX;
use csx_proto::{
    ClientId, CommandId, Completion, ErrorDetail, ExecuteInfo, MemRange, Op, ProgramIndex, Reply,
    Status, Windows, WireTrap, WireTrapKind,
};

use crate::functions::{CallContext, STOPPED_IN_FUNCTION};
use crate::programs::RunTicket;
use crate::rangeset::{check_ranges, RangeSetUse};
use crate::runtime::{ns, Shared};
use crate::slm::{LeaseRequest, Leases};
use crate::state::StateMapping;
use crate::status::{fail, fail_with, window_status, ToStatus};

/// Region of `struct csx_args`.
pub const ARGS_REGION: RegionIdx = RegionIdx(abi::ARGS_REGION);
/// Region of the shared state.
pub const STATE_REGION: RegionIdx = RegionIdx(abi::STATE_REGION);
/// Region of window 0; window `i` is at `WINDOW_REGION_FIRST + i`.
pub const WINDOW_REGION_FIRST: RegionIdx = RegionIdx(abi::WINDOW_REGION_FIRST);

const _: () = assert!(ARGS_REGION.0 == RegionIdx::EMBEDDER_FIRST.0);
const _: () = assert!(
    WINDOW_REGION_FIRST.0 + WINDOWS_MAX as u32
        <= RegionIdx::EMBEDDER_FIRST.0 + RegionIdx::EMBEDDER_COUNT
);

// The protocol's bounds must fit the VM's (csx-proto cannot see csx-ebpf, so the
// relations are checked here, where both meet).
const _: () = assert!(csx_proto::limits::WINDOW_SIZE_MAX <= csx_ebpf::limits::REGION_SIZE_MAX);
const _: () = assert!(csx_proto::limits::STATE_SIZE_MAX <= csx_ebpf::limits::REGION_SIZE_MAX);
const _: () = assert!(csx_proto::limits::FUNCTIONS_MAX == csx_ebpf::limits::FUNCTIONS_MAX);
const _: () = assert!(csx_proto::limits::FUEL_MAX >= csx_ebpf::limits::FUEL_DEFAULT);

/// The region of window `i`.
pub fn window_region(i: usize) -> RegionIdx {
    assert!(i < WINDOWS_MAX);
    RegionIdx(WINDOW_REGION_FIRST.0 + i as u32)
}

/// Builds `struct csx_args` ([`csx_proto::abi::args`]).
pub fn build_args(cparam1: u64, cparam2: u64, window_lens: &[u64], params: &[u8]) -> Vec<u8> {
    abi::args::encode(cparam1, cparam2, window_lens, params)
}

/// The wire form of a VM trap.
pub fn wire_trap(t: &Trap) -> WireTrap {
    let kind = match &t.kind {
        TrapKind::OutOfBounds { addr, size, write } => WireTrapKind::OutOfBounds {
            addr: *addr,
            size: *size,
            write: *write,
        },
        TrapKind::ReadOnly { addr, size } => WireTrapKind::ReadOnly {
            addr: *addr,
            size: *size,
        },
        TrapKind::FuelExhausted { budget } => WireTrapKind::FuelExhausted { budget: *budget },
        TrapKind::CallDepthExceeded { depth_max } => WireTrapKind::CallDepthExceeded {
            depth_max: *depth_max,
        },
        TrapKind::UnknownHelper { id } => WireTrapKind::UnknownHelper { id: *id },
        TrapKind::HelperArgument {
            helper,
            arg,
            addr,
            len,
        } => WireTrapKind::HelperArgument {
            helper: *helper,
            arg: *arg,
            addr: *addr,
            len: *len,
        },
        TrapKind::HelperAbort {
            helper,
            code,
            message,
        } => WireTrapKind::HelperAbort {
            helper: *helper,
            code: *code,
            message: csx_proto::completion::clip(
                message.clone(),
                csx_proto::limits::MESSAGE_SIZE_MAX,
            ),
        },
        other => WireTrapKind::Other {
            message: csx_proto::completion::clip(
                other.to_string(),
                csx_proto::limits::MESSAGE_SIZE_MAX,
            ),
        },
    };
    WireTrap { pc: t.pc, kind }
}

/// Why the device stopped a run: the reason code in its [`StopFlag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// An Abort command named it.
    Abort,
    /// It ran past its time limit.
    TimeLimit,
    /// Its queue pair closed (the client went away).
    QueueClosed,
    /// The device is closing.
    Shutdown,
}

impl StopReason {
    const ALL: [StopReason; 4] = [
        StopReason::Abort,
        StopReason::TimeLimit,
        StopReason::QueueClosed,
        StopReason::Shutdown,
    ];

    /// The code in the stop flag (never 0).
    pub const fn code(self) -> u32 {
        match self {
            StopReason::Abort => 1,
            StopReason::TimeLimit => 2,
            StopReason::QueueClosed => 3,
            StopReason::Shutdown => 4,
        }
    }

    /// The reason a flag's code stands for.
    pub fn from_code(code: u32) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// An execution's scalars: what a run sees in `struct csx_args` besides its windows,
/// its fuel budget and its stop flag.
#[derive(Clone, Copy, Debug)]
pub struct RunCall<'p> {
    pub cparam1: u64,
    pub cparam2: u64,
    pub params: &'p [u8],
    pub fuel: u64,
    /// `None`: nothing can stop the run before its fuel runs out.
    pub stop: Option<&'p StopFlag>,
    /// Block counters the run adds its executed blocks to (`csx_ebpf::count`), one per
    /// block of the engine's program; `None`: no counting.
    pub counts: Option<&'p ExecCounts>,
}

/// Runs `engine` over `windows` exactly as Execute Program does: builds `struct
/// csx_args`, maps args (read-only), the state (by `map_state`, which maps region 3 and
/// returns its address and length) and window i at region 4+i, and passes r1-r5 as the
/// module doc says. The device and the host side of λ-IO (`csx_lambda`) both run
/// programs through here, so a program sees the same memory on either side.
pub fn run_on_windows<'w>(
    engine: &dyn Engine,
    windows: Vec<&'w mut [u8]>,
    map_state: impl for<'m> FnOnce(&mut MemoryMap<'m>) -> (u64, u64),
    call: &RunCall<'_>,
    host: &mut dyn HelperHost,
) -> RunOutcome {
    assert!(windows.len() <= WINDOWS_MAX);
    let lens: Vec<u64> = windows.iter().map(|w| w.len() as u64).collect();
    let args = build_args(call.cparam1, call.cparam2, &lens, call.params);
    let mut mem = MemoryMap::new();
    let args_addr = mem
        .map_read_only(ARGS_REGION, &args)
        .expect("the argument block is small");
    let (state_addr, state_len) = map_state(&mut mem);
    let mut r1r2 = (0, 0);
    for (i, slice) in windows.into_iter().enumerate() {
        let len = slice.len() as u64;
        let addr = mem
            .map_read_write(window_region(i), slice)
            .expect("window lengths are checked against the region limit");
        if i == 0 {
            r1r2 = (addr, len);
        }
    }
    let regs = [r1r2.0, r1r2.1, state_addr, state_len, args_addr];
    let opts = RunOptions {
        fuel: call.fuel,
        stop: call.stop,
        counts: call.counts,
    };
    engine.run(&mut mem, regs, &opts, host)
}

/// The windows of one execution: a registered set (held against deletion while the
/// run lasts) or the command's inline ranges.
enum WindowRanges<'a> {
    Set(RangeSetUse<'a>),
    Inline(&'a [MemRange]),
}

impl WindowRanges<'_> {
    fn ranges(&self) -> &[MemRange] {
        match self {
            WindowRanges::Set(u) => &u.ranges,
            WindowRanges::Inline(r) => r,
        }
    }
}

type Refusal = Box<Completion>;

impl Shared {
    fn resolve_windows<'a>(
        &'a self,
        client: ClientId,
        windows: &'a Windows,
    ) -> Result<WindowRanges<'a>, Refusal> {
        match windows {
            Windows::RangeSet(rsid) => self
                .rangesets
                .acquire(client, *rsid)
                .map(WindowRanges::Set)
                .map_err(|e| Box::new(fail_with(&e))),
            Windows::Inline(r) => match check_ranges(r) {
                Ok(()) => Ok(WindowRanges::Inline(r)),
                Err(e) => Err(Box::new(fail(e.status(), "execute", e.to_string()))),
            },
        }
    }

    /// Leases the windows' bytes: bounds, ownership, and no other command on them.
    fn lease_windows(&self, client: ClientId, ranges: &[MemRange]) -> Result<Leases, Refusal> {
        let requests: Vec<LeaseRequest> = ranges
            .iter()
            .map(|r| LeaseRequest {
                handle: r.handle,
                offset: r.offset,
                len: r.len,
                write: true,
                overwrite: false,
            })
            .collect();
        self.slm
            .lease(client, &requests)
            .map_err(|e| Box::new(fail(window_status(&e), "execute", e.to_string())))
    }

    /// Borrows the program's engine first (the slot cannot be deactivated meanwhile),
    /// then resolves the windows and leases their bytes.
    fn admit<'a>(
        &'a self,
        client: ClientId,
        (pind, generation): (ProgramIndex, Option<u64>),
        windows: &'a Windows,
    ) -> Result<(RunTicket<'a>, WindowRanges<'a>, Leases), Refusal> {
        let ticket = self
            .programs
            .begin_run_of(pind, generation)
            .map_err(|e| Box::new(fail_with(&e)))?;
        let resolved = self.resolve_windows(client, windows)?;
        let leases = self.lease_windows(client, resolved.ranges())?;
        Ok((ticket, resolved, leases))
    }

    /// Runs one Execute command (on an engine thread, or inline on a transport's) under
    /// `stop`; `leash`: the hook the watchdog calls if the run lasts (an inline run).
    pub(crate) fn execute(
        &self,
        client: ClientId,
        op: &Op,
        stop: &Arc<StopFlag>,
        leash: Option<crate::runtime::LeashHook>,
    ) -> Completion {
        let Op::Execute {
            pind,
            windows,
            cparam1,
            cparam2,
            params,
            fuel,
            time_limit_ms,
            generation,
        } = op
        else {
            unreachable!("execute is only called for Execute");
        };
        if let Some(c) = stopped_in_queue(stop) {
            return c;
        }
        let prepare_start = Instant::now();
        let (ticket, _resolved, mut leases) =
            match self.admit(client, (*pind, *generation), windows) {
                Ok(admitted) => admitted,
                Err(c) => return *c,
            };
        // Next, build the argument block and the region table, and run.
        let state = self.state.map();
        // Where the profile models compute from work (`PerfModel::counts_work`), the
        // execution counts its instructions and its modelled compute comes from them
        // (`crate::perf`); otherwise it runs the uncounted code, priced from fuel.
        let blocks = ticket.engine.program().blocks();
        let counts = self
            .config
            .perf
            .counts_work()
            .then(|| ExecCounts::new(blocks));
        let call = RunCall {
            cparam1: *cparam1,
            cparam2: *cparam2,
            params,
            fuel: fuel.unwrap_or(FUEL_DEFAULT),
            stop: Some(stop),
            counts: counts.as_ref(),
        };
        let mut ctx = CallContext::new(&self.files, self.epoch).with_stop(stop);
        let prepare_ns = ns(prepare_start.elapsed());
        let limit_ms = time_limit_ms.unwrap_or_else(|| self.config.time_limit_ms_effective());
        let run_start = Instant::now();
        let deadline = run_start + Duration::from_millis(u64::from(limit_ms));
        let watch = self.watchdog.watch(deadline, stop, leash);
        let outcome = run_with_state(ticket.engine.as_ref(), &mut leases, &state, &call, &mut ctx);
        let run = run_start.elapsed();
        drop(watch);
        // The region table's borrows end here; release the state and the windows before
        // the completion exists, so the windows are free when the host sees it.
        drop(state);
        drop(leases);
        let work = counts.as_ref().map(|counts| blocks.work(&counts.values()));
        let mut c = completion_of(&outcome, &mut ctx, work.as_ref());
        mark_stop(&mut c, &outcome, stop, limit_ms, run);
        c.timing.prepare_ns = prepare_ns;
        c.timing.execute_ns = ns(run.saturating_sub(ctx.io));
        c
    }
}

/// Runs `engine` on the leased windows with the device's shared state mapped as its
/// state region.
fn run_with_state(
    engine: &dyn Engine,
    leases: &mut Leases,
    state: &StateMapping<'_>,
    call: &RunCall<'_>,
    ctx: &mut CallContext<'_>,
) -> RunOutcome {
    let windows: Vec<&mut [u8]> = leases
        .slices_mut()
        .into_iter()
        .map(|s| s.expect("windows are leased writable"))
        .collect();
    run_on_windows(
        engine,
        windows,
        |mem| {
            // SAFETY: the mapping's bytes live in the device's shared state, which
            // outlives this run; `state` (the gate held shared) keeps clear and save
            // from touching them until it drops after the run. Concurrent runs write
            // them racily by design (see `state`), which the VM tolerates.
            let addr = unsafe { mem.map_raw(STATE_REGION, state.ptr, state.len, true) }
                .expect("the shared state size is bounded below the region limit");
            (addr, state.len as u64)
        },
        call,
        ctx,
    )
}

/// The completion of a run aborted while it waited in the queue, if it was.
fn stopped_in_queue(stop: &StopFlag) -> Option<Completion> {
    let reason = StopReason::from_code(stop.reason())?;
    let mut c = Completion::new(CommandId(0), Status::Aborted);
    c.detail = Some(ErrorDetail::new(
        "execute",
        0,
        format!("{} before it ran", stop_cause(reason)),
    ));
    Some(c)
}

/// Marks `c` stopped (by abort, close or time limit) or overrun when the run's outcome
/// says so; a run that ended on its own inside its limit keeps its completion.
fn mark_stop(
    c: &mut Completion,
    outcome: &RunOutcome,
    stop: &StopFlag,
    limit_ms: u32,
    run: Duration,
) {
    match &outcome.result {
        Err(Trap {
            pc,
            kind: TrapKind::Stopped { reason },
        }) => stopped(c, *pc, *reason, outcome.fuel_used, limit_ms),
        // A device function saw the flag and stopped the run inside its call.
        Err(Trap {
            pc,
            kind:
                TrapKind::HelperAbort {
                    code: STOPPED_IN_FUNCTION,
                    ..
                },
        }) if stop.is_set() => stopped(c, *pc, stop.reason(), outcome.fuel_used, limit_ms),
        // The run ended on its own, but after its time limit passed (inside one long
        // call, which the flag could not interrupt): past its limit, not a success.
        // The watchdog's flag is one witness; the run's own clock is the other, so a
        // watchdog thread delayed past the run's end (a loaded machine) changes nothing.
        Ok(_)
            if StopReason::from_code(stop.reason()) == Some(StopReason::TimeLimit)
                || run > Duration::from_millis(u64::from(limit_ms)) =>
        {
            overran(c, outcome.fuel_used, limit_ms, run);
        }
        _ => {}
    }
}

/// What stopped a run, for its detail message.
fn stop_cause(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Abort => "aborted by an abort command",
        StopReason::TimeLimit => "stopped at its time limit",
        StopReason::QueueClosed => "aborted because its queue pair closed",
        StopReason::Shutdown => "aborted because the device is closing",
    }
}

/// Turns the completion of a run its stop flag ended (`reason` the flag's code) into an
/// Aborted or TimeLimitExceeded one, keeping its fuel and trace.
fn stopped(c: &mut Completion, pc: u32, reason: u32, fuel_used: u64, limit_ms: u32) {
    let reason = StopReason::from_code(reason).expect("the device sets only its own reasons");
    c.trap = None;
    c.value = 0;
    let message = match reason {
        StopReason::TimeLimit => {
            c.status = Status::TimeLimitExceeded;
            format!(
                "ran past its time limit of {limit_ms} ms: stopped at pc {pc} after \
                 {fuel_used} fuel"
            )
        }
        other => {
            c.status = Status::Aborted;
            format!("{} at pc {pc} after {fuel_used} fuel", stop_cause(other))
        }
    };
    c.detail = Some(ErrorDetail::new("execute", 0, message));
}

/// Turns the completion of a run that returned after its time limit passed into a
/// TimeLimitExceeded one (its r0 is not reported: the run was over its limit).
fn overran(c: &mut Completion, fuel_used: u64, limit_ms: u32, ran: Duration) {
    c.status = Status::TimeLimitExceeded;
    c.trap = None;
    c.value = 0;
    c.detail = Some(ErrorDetail::new(
        "execute",
        0,
        format!(
            "ran past its time limit of {limit_ms} ms: returned after {} ms and {fuel_used} \
             fuel, inside a device-function call too long to interrupt",
            ran.as_millis()
        ),
    ));
}

/// r0 or the trap, with the run's first function failure, its trace and its I/O time.
fn completion_of(
    outcome: &RunOutcome,
    ctx: &mut CallContext<'_>,
    work: Option<&WorkCounts>,
) -> Completion {
    let mut c = Completion::new(CommandId(0), Status::Success);
    match &outcome.result {
        Ok(r0) => c.value = *r0,
        Err(trap) => {
            c.status = Status::Trap;
            c.trap = Some(wire_trap(trap));
        }
    }
    c.detail = ctx.detail.take();
    c.reply = Reply::Execute(ExecuteInfo {
        fuel_used: outcome.fuel_used,
        trace: std::mem::take(&mut ctx.trace),
        // Empty when the device did not count (the wire's "not counted").
        work: work.map(|w| w.0.to_vec()).unwrap_or_default(),
    });
    c.timing.transfer_ns = ns(ctx.io);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ABI's address of each window is the VM's address of its region.
    #[test]
    fn abi_addresses_are_the_vms() {
        for i in 0..WINDOWS_MAX {
            assert_eq!(abi::window_base(i), window_region(i).vaddr(0));
        }
        assert_eq!(abi::region_base(abi::ARGS_REGION), ARGS_REGION.vaddr(0));
        assert_eq!(abi::region_base(abi::STATE_REGION), STATE_REGION.vaddr(0));
        let a = build_args(1, 2, &[10, 20], b"xyz");
        let at = abi::args::WINDOWS_OFFSET + abi::args::WINDOW_SIZE;
        let addr = u64::from_le_bytes(a[at..at + 8].try_into().unwrap());
        assert_eq!(addr, window_region(1).vaddr(0));
    }

    #[test]
    fn traps_convert() {
        let t = Trap {
            pc: 7,
            kind: TrapKind::FuelExhausted { budget: 9 },
        };
        let w = wire_trap(&t);
        assert_eq!(
            w,
            WireTrap {
                pc: 7,
                kind: WireTrapKind::FuelExhausted { budget: 9 }
            }
        );
        assert_eq!(w.to_string(), t.to_string());
    }
}
