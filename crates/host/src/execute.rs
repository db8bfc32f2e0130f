//! Execute Program requests and results.
//!
//! [`ExecuteRequest`] builds the command (program, windows, cparams, parameter bytes,
//! fuel); [`Execution`] is what came back: r0 and the status, the trap if the program
//! faulted, the device's timing breakdown, the first registered-function failure and
//! the program's trace messages.
//!
//! Windows are device memory ranges the program sees as regions: window 0 in r1/r2,
//! every window in `args->windows[i]` (see `csx_device::execute` for the ABI).

use csx_proto::{
    Completion, ErrorDetail, MemHandle, MemRange, Op, ProgramIndex, RangeSetId, Reply, Status,
    Timing, Windows, WireTrap,
};

use crate::error::CallError;

/// One execution to ask for (builder style: `ExecuteRequest::new(pind).window(..)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecuteRequest {
    pub pind: ProgramIndex,
    pub windows: Windows,
    pub cparam1: u64,
    pub cparam2: u64,
    pub params: Vec<u8>,
    /// `None`: the device's default budget.
    pub fuel: Option<u64>,
    /// Milliseconds the run may take; `None`: the device's default (1 s unless its
    /// `device.json` says otherwise).
    pub time_limit_ms: Option<u32>,
    /// The generation of the program meant (`ProgramInfo::generation` from
    /// `Device::programs_with_generations`): the device refuses the run with
    /// `CallError::ProgramChanged` when the slot holds another program. `None`: whatever
    /// the slot holds.
    pub generation: Option<u64>,
}

impl ExecuteRequest {
    /// Runs the program in `pind` with no windows, zero cparams, no parameters.
    pub fn new(pind: ProgramIndex) -> ExecuteRequest {
        ExecuteRequest {
            pind,
            windows: Windows::Inline(Vec::new()),
            cparam1: 0,
            cparam2: 0,
            params: Vec::new(),
            fuel: None,
            time_limit_ms: None,
            generation: None,
        }
    }

    /// Adds an inline window (replacing a range set, if one was chosen).
    pub fn window(mut self, handle: MemHandle, offset: u64, len: u64) -> ExecuteRequest {
        let range = MemRange {
            handle,
            offset,
            len,
        };
        match &mut self.windows {
            Windows::Inline(ranges) => ranges.push(range),
            Windows::RangeSet(_) => self.windows = Windows::Inline(vec![range]),
        }
        self
    }

    /// Uses a registered range set as the windows.
    pub fn range_set(mut self, rsid: RangeSetId) -> ExecuteRequest {
        self.windows = Windows::RangeSet(rsid);
        self
    }

    pub fn cparams(mut self, cparam1: u64, cparam2: u64) -> ExecuteRequest {
        self.cparam1 = cparam1;
        self.cparam2 = cparam2;
        self
    }

    /// The parameter bytes (`args->params`).
    pub fn params(mut self, params: Vec<u8>) -> ExecuteRequest {
        self.params = params;
        self
    }

    pub fn fuel(mut self, fuel: u64) -> ExecuteRequest {
        self.fuel = Some(fuel);
        self
    }

    /// The run's time limit (1 ..= `csx_proto::limits::TIME_LIMIT_MS_MAX` ms).
    pub fn time_limit_ms(mut self, ms: u32) -> ExecuteRequest {
        self.time_limit_ms = Some(ms);
        self
    }

    /// Runs only the program of generation `generation` (see
    /// [`ExecuteRequest::generation`]).
    pub fn generation(mut self, generation: u64) -> ExecuteRequest {
        self.generation = Some(generation);
        self
    }

    /// The command.
    pub fn to_op(&self) -> Op {
        Op::Execute {
            pind: self.pind,
            windows: self.windows.clone(),
            cparam1: self.cparam1,
            cparam2: self.cparam2,
            params: self.params.clone(),
            fuel: self.fuel,
            time_limit_ms: self.time_limit_ms,
            generation: self.generation,
        }
    }
}

/// The result of an execution that ran (it returned or trapped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Execution {
    /// The program's return value (0 after a trap).
    pub r0: u64,
    /// `Success` or `Trap`.
    pub status: Status,
    pub trap: Option<WireTrap>,
    pub timing: Timing,
    /// The first registered function that failed during the run, even if the program
    /// went on.
    pub detail: Option<ErrorDetail>,
    pub fuel_used: u64,
    /// Messages from `csx_trace`, in order.
    pub trace: Vec<String>,
    /// Instructions executed per class (`csx_proto::ExecuteInfo::work`); empty when the
    /// device did not count.
    pub work: Vec<u64>,
}

impl Execution {
    /// The result in an Execute completion; a status other than success or trap is the
    /// typed error (no program, not activated, bad windows, aborted, past its time
    /// limit, ...).
    pub fn from_completion(c: Completion) -> Result<Execution, CallError> {
        if !matches!(c.status, Status::Success | Status::Trap) {
            return Err(CallError::from_completion("execute", c));
        }
        let (fuel_used, trace, work) = match c.reply {
            Reply::Execute(info) => (info.fuel_used, info.trace, info.work),
            _ => (0, Vec::new(), Vec::new()),
        };
        Ok(Execution {
            r0: c.value,
            status: c.status,
            trap: c.trap,
            timing: c.timing,
            detail: c.detail,
            fuel_used,
            trace,
            work,
        })
    }

    /// Whether the program trapped.
    pub fn trapped(&self) -> bool {
        self.status == Status::Trap
    }

    /// r0 as the signed value C programs return (`long`).
    pub fn r0_signed(&self) -> i64 {
        self.r0 as i64
    }
}
