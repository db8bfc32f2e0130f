//! Tiering: a program is usable as soon as the quick tier has compiled it (well under a
//! millisecond), and moves to Cranelift's faster code once that compile (tens of
//! milliseconds for a large program) is done.
//!
//! [`TieredProgram`] is an [`Engine`]. It holds the quick code and a slot for the
//! optimised code; [`Promotion`] says when the optimising compile starts: on a
//! background thread at once, on a background thread after a number of runs, or only
//! when the embedder calls [`TieredProgram::optimize`] (the hook: it compiles on the
//! caller's thread unless the optimised code is there already). The slot is a `OnceLock`: a run reads it with one
//! acquire load and takes the optimised code once it is there, so the switch is atomic
//! and runs already in progress finish on the quick code they started on. Both tiers
//! give the same result, trap and fuel (each matches the interpreter), so when the
//! switch happens is invisible to the program.
//!
//! If the Cranelift compile fails (it should not for a verified program), the program
//! stays on the quick tier and [`TieredProgram::optimize`] reports the error. On hosts
//! without the quick tier (not x86-64), construction compiles with Cranelift directly
//! and the program is optimised from the start.
//!
//! Priority: the background compile runs on a thread of low priority (nice
//! [`BACKGROUND_NICE`]), so on a busy host it takes a small share of a core from the
//! runs, the device's media reads and its decoding, and on a busy host the program stays
//! on the quick tier longer. Not `SCHED_IDLE`: a compile shares locks with the runs (the
//! allocator's arenas, the address space's lock when it maps code), and an idle-priority
//! thread preempted while it holds one waits for a core as long as any other thread
//! wants one, so a run that needs the lock waited past its time limit on a loaded host
//! (a λ of nine instructions stopped at its 1 s limit while two busy loops ran; at nice
//! [`BACKGROUND_NICE`] the holder gets the core back within tens of milliseconds).
//! [`TieredProgram::optimize`] does not wait for a background compile (it could wait
//! behind every busy thread of the host): it compiles at its caller's priority, and
//! whichever compile lands first is kept.
//!
//! Counting: a program built [`TieredProgram::with_counting`] is for an embedder whose
//! every run counts its work (`RunOptions::counts`): the quick tier's counting variant is
//! prepared at construction, and the promotion compiles Cranelift's counting variant
//! before it switches, so no run pays for a compile. Counts are the same on either tier
//! (each tier counts by the rule of `csx_ebpf::count`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use csx_ebpf::engine::{Engine, RunOptions, RunOutcome};
use csx_ebpf::helper::HelperHost;
use csx_ebpf::memory::MemoryMap;
use csx_ebpf::program::VerifiedProgram;

use crate::{JitError, JitProgram};

/// When the optimising (Cranelift) compile of a [`TieredProgram`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// On a background thread, as soon as the program is built.
    Background,
    /// On a background thread, when the program starts its `n`-th run (`n >= 1`): a
    /// program run a few times never pays for Cranelift.
    AfterRuns(u64),
    /// Only when [`TieredProgram::optimize`] is called.
    Manual,
}

/// Which code a [`TieredProgram`] runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The one-pass baseline JIT (x86-64 only).
    Quick,
    /// Cranelift's optimised code.
    Optimized,
}

/// The nice value of the background compile's thread: about a tenth of a default
/// thread's share of a contended core (CFS weights 110 against 1024).
pub const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread to nice [`BACKGROUND_NICE`], unless it runs at a lower
/// priority already. Off Linux, or refused, the thread keeps its priority.
fn background_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no pointers; `who = 0` with PRIO_PROCESS is the calling thread on
        // Linux, whose nice value is its own. An error reads as -1, which is below
        // BACKGROUND_NICE, so the set below is tried.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        if nice < BACKGROUND_NICE {
            // SAFETY: as above.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE);
            }
        }
    }
}

type Slot = Arc<OnceLock<Result<JitProgram, JitError>>>;

/// The optimising compile: Cranelift, plus its counting variant when `counting`.
type Optimizer = fn(Arc<VerifiedProgram>, bool) -> Result<JitProgram, JitError>;

fn cranelift(program: Arc<VerifiedProgram>, counting: bool) -> Result<JitProgram, JitError> {
    let jit = JitProgram::compile(program)?;
    if counting {
        // A promotion whose counting variant failed would count nothing: stay quick.
        jit.prepare_counting()?;
    }
    Ok(jit)
}

/// A program on two tiers: quick code at once, Cranelift's when it is ready.
pub struct TieredProgram {
    program: Arc<VerifiedProgram>,
    #[cfg(target_arch = "x86_64")]
    quick: crate::QuickProgram,
    optimized: Slot,
    promotion: Promotion,
    /// Whether runs count their work, so both tiers prepare their counting variants.
    counting: bool,
    optimizer: Optimizer,
    runs: AtomicU64,
    started: AtomicBool,
    ready_after: Duration,
}

impl std::fmt::Debug for TieredProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredProgram")
            .field("program", &self.program.name())
            .field("tier", &self.tier())
            .field("promotion", &self.promotion)
            .finish()
    }
}

impl TieredProgram {
    /// Compiles `program` on the quick tier (or, where there is none, with Cranelift)
    /// and arranges the optimising compile as `promotion` says.
    pub fn new(
        program: Arc<VerifiedProgram>,
        promotion: Promotion,
    ) -> Result<TieredProgram, JitError> {
        Self::build(program, promotion, false, cranelift)
    }

    /// As [`TieredProgram::new`], for runs that count their work (`counting`): both
    /// tiers' counting variants are compiled before a run can use them (see the module
    /// doc). `counting = false` is [`TieredProgram::new`].
    pub fn with_counting(
        program: Arc<VerifiedProgram>,
        promotion: Promotion,
        counting: bool,
    ) -> Result<TieredProgram, JitError> {
        Self::build(program, promotion, counting, cranelift)
    }

    fn build(
        program: Arc<VerifiedProgram>,
        promotion: Promotion,
        counting: bool,
        optimizer: Optimizer,
    ) -> Result<TieredProgram, JitError> {
        #[cfg(target_arch = "x86_64")]
        {
            let started = std::time::Instant::now();
            let quick = crate::QuickProgram::compile(program.clone())?;
            if counting {
                quick.prepare_counting()?;
            }
            let ready_after = started.elapsed();
            let tiered = TieredProgram {
                program,
                quick,
                optimized: Arc::new(OnceLock::new()),
                promotion,
                counting,
                optimizer,
                runs: AtomicU64::new(0),
                started: AtomicBool::new(false),
                ready_after,
            };
            if promotion == Promotion::Background {
                tiered.start_background();
            }
            Ok(tiered)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let started = std::time::Instant::now();
            let jit = optimizer(program.clone(), counting)?;
            let ready_after = started.elapsed();
            Ok(TieredProgram {
                program,
                optimized: Arc::new(OnceLock::from(Ok(jit))),
                promotion,
                counting,
                optimizer,
                runs: AtomicU64::new(0),
                started: AtomicBool::new(true),
                ready_after,
            })
        }
    }

    /// The tier runs use now.
    pub fn tier(&self) -> Tier {
        match self.optimized.get() {
            Some(Ok(_)) => Tier::Optimized,
            _ => Tier::Quick,
        }
    }

    /// How long construction took before the program could run (the quick compile, and
    /// its counting variant when counting).
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// The error of the optimising compile, if it ran and failed (the program then runs
    /// on the quick tier for good, correct and slower).
    pub fn promotion_error(&self) -> Option<&JitError> {
        self.optimized.get().and_then(|r| r.as_ref().err())
    }

    /// Runs the optimising compile on this thread unless its outcome is there already
    /// (a background compile still running is not waited for: the first outcome to land
    /// is kept); returns its error if it failed (the program then stays on the quick
    /// tier).
    pub fn optimize(&self) -> Result<(), JitError> {
        self.started.store(true, Ordering::Relaxed);
        let outcome = match self.optimized.get() {
            Some(done) => done,
            None => {
                let compiled = (self.optimizer)(self.program.clone(), self.counting);
                // Another compile may have landed meanwhile: its outcome stays.
                let _ = self.optimized.set(compiled);
                self.optimized
                    .get()
                    .expect("set above or by another compile")
            }
        };
        match outcome {
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Starts the optimising compile on a background thread, once.
    fn start_background(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let slot = self.optimized.clone();
        let program = self.program.clone();
        let (optimizer, counting) = (self.optimizer, self.counting);
        let spawned = std::thread::Builder::new()
            .name("csx-jit-optimize".into())
            .spawn(move || {
                background_priority();
                if slot.get().is_none() {
                    let _ = slot.set(optimizer(program, counting));
                }
            });
        // Without a thread the program stays on the quick tier (correct, slower);
        // `optimize` can still promote it.
        if spawned.is_err() {
            self.started.store(false, Ordering::Release);
        }
    }

    /// Counts a run against [`Promotion::AfterRuns`].
    fn count_run(&self) {
        if let Promotion::AfterRuns(n) = self.promotion {
            let runs = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
            if runs >= n && !self.started.load(Ordering::Relaxed) {
                self.start_background();
            }
        }
    }
}

impl Engine for TieredProgram {
    fn program(&self) -> &VerifiedProgram {
        &self.program
    }

    fn run(
        &self,
        mem: &mut MemoryMap<'_>,
        args: [u64; 5],
        opts: &RunOptions<'_>,
        host: &mut dyn HelperHost,
    ) -> RunOutcome {
        if let Some(Ok(jit)) = self.optimized.get() {
            return jit.run(mem, args, opts, host);
        }
        self.count_run();
        #[cfg(target_arch = "x86_64")]
        {
            self.quick.run(mem, args, opts, host)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            unreachable!("without the quick tier, construction compiles with Cranelift")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_ebpf::asm::assemble;
    use csx_ebpf::helper::{ConformanceHost, FunctionTable};
    use csx_ebpf::interp::Interpreter;
    use csx_ebpf::memory::RegionIdx;
    use csx_ebpf::program::Program;
    use csx_ebpf::verifier::verify;

    /// A loop over the 64 input bytes; runs out of fuel at a small budget.
    fn program() -> Arc<VerifiedProgram> {
        let src = "mov %r0, 0\nmov %r3, 0\nloop:\nmov %r4, %r1\nadd %r4, %r3\n\
                   ldxb %r4, [%r4+0]\nmul %r0, 31\nadd %r0, %r4\nadd %r3, 1\n\
                   jlt %r3, %r2, loop\nexit";
        let p = Program::from_insns("tiered", assemble(src).unwrap());
        Arc::new(verify(p, Arc::new(FunctionTable::conformance())).unwrap())
    }

    fn run(engine: &dyn Engine, fuel: u64) -> RunOutcome {
        let data: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(3))
            .collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_only(RegionIdx(2), &data).unwrap();
        let opts = RunOptions {
            fuel,
            ..RunOptions::default()
        };
        engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut ConformanceHost)
    }

    fn agrees(t: &TieredProgram, interp: &Interpreter) {
        for fuel in [10, 1000] {
            assert_eq!(
                run(t, fuel),
                run(interp, fuel),
                "fuel {fuel}, {:?}",
                t.tier()
            );
        }
    }

    #[test]
    fn manual_promotion_switches_when_asked() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let t = TieredProgram::new(p, Promotion::Manual).unwrap();
        let first = if cfg!(target_arch = "x86_64") {
            Tier::Quick
        } else {
            Tier::Optimized
        };
        assert_eq!(t.tier(), first);
        for _ in 0..5 {
            agrees(&t, &interp);
        }
        assert_eq!(t.tier(), first, "manual promotion never starts by itself");
        t.optimize().unwrap();
        assert_eq!(t.tier(), Tier::Optimized);
        agrees(&t, &interp);
    }

    #[test]
    fn promotion_after_runs_starts_at_the_nth_run() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let t = TieredProgram::new(p, Promotion::AfterRuns(3)).unwrap();
        agrees(&t, &interp); // runs 1 and 2
        if cfg!(target_arch = "x86_64") {
            assert!(!t.started.load(Ordering::Relaxed));
        }
        agrees(&t, &interp); // runs 3 and 4: the compile starts
        assert!(t.started.load(Ordering::Relaxed));
        t.optimize().unwrap();
        assert_eq!(t.tier(), Tier::Optimized);
        agrees(&t, &interp);
    }

    /// A counted run's outcome and counts.
    fn run_counted(engine: &dyn Engine, fuel: u64) -> (RunOutcome, Vec<u64>) {
        let counts = csx_ebpf::count::ExecCounts::new(engine.program().blocks());
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(5)).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_only(RegionIdx(2), &data).unwrap();
        let opts = RunOptions {
            fuel,
            counts: Some(&counts),
            ..RunOptions::default()
        };
        let out = engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut ConformanceHost);
        (out, counts.values())
    }

    /// Counted runs before and after the promotion give the interpreter's outcome,
    /// fuel and block counts (a trap mid-loop included).
    #[test]
    fn counted_runs_agree_on_both_tiers() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let t = TieredProgram::with_counting(p, Promotion::Manual, true).unwrap();
        for fuel in [10, 37, 1000] {
            let want = run_counted(&interp, fuel);
            assert!(want.1.iter().any(|&c| c > 1), "the loop block counts");
            assert_eq!(run_counted(&t, fuel), want, "fuel {fuel}, {:?}", t.tier());
        }
        t.optimize().unwrap();
        assert_eq!(t.tier(), Tier::Optimized);
        for fuel in [10, 37, 1000] {
            assert_eq!(
                run_counted(&t, fuel),
                run_counted(&interp, fuel),
                "fuel {fuel}"
            );
        }
    }

    fn rejecting_optimizer(
        program: Arc<VerifiedProgram>,
        _counting: bool,
    ) -> Result<JitProgram, JitError> {
        Err(JitError::Codegen {
            program: program.name().to_string(),
            message: "rejected by the test".into(),
        })
    }

    /// An optimising compile that fails leaves the program on the quick tier, running
    /// as before, and the error is reported typed; off x86-64 (no quick tier) the
    /// construction itself fails with it.
    #[test]
    fn a_failed_promotion_keeps_the_quick_tier() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let built = TieredProgram::build(p, Promotion::Background, true, rejecting_optimizer);
        if !cfg!(target_arch = "x86_64") {
            assert!(matches!(built, Err(JitError::Codegen { .. })));
            return;
        }
        let t = built.unwrap();
        let err = t.optimize().unwrap_err();
        assert!(err.to_string().contains("rejected by the test"), "{err}");
        assert_eq!(t.promotion_error(), Some(&err));
        assert_eq!(t.tier(), Tier::Quick);
        agrees(&t, &interp);
        for fuel in [10, 1000] {
            assert_eq!(run_counted(&t, fuel), run_counted(&interp, fuel));
        }
        assert_eq!(t.tier(), Tier::Quick);
    }

    /// Runs on several threads while the background compile lands: every run, on
    /// whichever tier it took, gives the interpreter's outcome.
    #[test]
    fn runs_during_the_switch_agree() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let want = run(&interp, 1000);
        let t = TieredProgram::new(p, Promotion::Background).unwrap();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..200 {
                        assert_eq!(run(&t, 1000), want);
                    }
                });
            }
        });
        t.optimize().unwrap();
        assert_eq!(t.tier(), Tier::Optimized);
        assert_eq!(run(&t, 1000), want);
    }

    /// The calling thread's scheduling policy and nice value (fields 41 and 19 of
    /// proc(5)'s stat).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn policy_and_nice() -> (u32, i32) {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_name.split(' ').collect();
        // The fields after the name start at field 3.
        (
            fields[41 - 3].parse().unwrap(),
            fields[19 - 3].parse().unwrap(),
        )
    }

    /// What [`recording_optimizer`] saw: the policy and nice value of each thread it
    /// ran on.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    static SEEN: std::sync::Mutex<Vec<(u32, i32)>> = std::sync::Mutex::new(Vec::new());

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn recording_optimizer(
        program: Arc<VerifiedProgram>,
        counting: bool,
    ) -> Result<JitProgram, JitError> {
        SEEN.lock().unwrap().push(policy_and_nice());
        cranelift(program, counting)
    }

    /// The background compile runs on a thread of low priority, not idle priority (see
    /// the module's note); the threads that build and run the program keep theirs.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn the_background_compile_runs_at_low_priority() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let mine = policy_and_nice();
        let t = TieredProgram::build(p, Promotion::Background, false, recording_optimizer).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while t.tier() != Tier::Optimized {
            assert!(
                std::time::Instant::now() < deadline,
                "no promotion in 120 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let seen = SEEN.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (policy, nice) = seen[0];
        assert_eq!(
            policy,
            libc::SCHED_OTHER as u32,
            "the compile ran at policy {policy}, nice {nice}"
        );
        // A test run already at a higher nice value keeps it.
        assert_eq!(
            nice,
            BACKGROUND_NICE.max(mine.1),
            "the compile ran at policy {policy}, nice {nice}"
        );
        assert_eq!(
            policy_and_nice(),
            mine,
            "the building thread keeps its priority"
        );
        agrees(&t, &interp);
    }

    /// Whether [`gated_optimizer`]'s background compiles may finish.
    #[cfg(target_arch = "x86_64")]
    static GATE: (std::sync::Mutex<bool>, std::sync::Condvar) =
        (std::sync::Mutex::new(false), std::sync::Condvar::new());

    /// Cranelift, except that on the background thread it first waits for the gate: a
    /// background compile that does not finish.
    #[cfg(target_arch = "x86_64")]
    fn gated_optimizer(
        program: Arc<VerifiedProgram>,
        counting: bool,
    ) -> Result<JitProgram, JitError> {
        if std::thread::current().name() == Some("csx-jit-optimize") {
            let (open, cv) = &GATE;
            let mut open = open.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
        }
        cranelift(program, counting)
    }

    /// `optimize` does not wait for a background compile that has not finished (at idle
    /// priority on a busy host it might not for long): it compiles on its caller's
    /// thread, and the background compile's later outcome changes nothing.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn optimize_does_not_wait_for_the_background_compile() {
        let p = program();
        let interp = Interpreter::new(p.clone());
        let t = Arc::new(
            TieredProgram::build(p, Promotion::Background, true, gated_optimizer).unwrap(),
        );
        assert!(t.started.load(Ordering::Relaxed));
        let (tx, rx) = std::sync::mpsc::channel();
        let caller = Arc::clone(&t);
        std::thread::spawn(move || tx.send(caller.optimize()).unwrap());
        let done = rx.recv_timeout(Duration::from_secs(120));
        let (open, cv) = &GATE;
        *open.lock().unwrap() = true;
        cv.notify_all();
        done.expect("optimize waited for the stalled background compile")
            .unwrap();
        assert_eq!(t.tier(), Tier::Optimized);
        agrees(&t, &interp);
        for fuel in [10, 1000] {
            assert_eq!(run_counted(&*t, fuel), run_counted(&interp, fuel));
        }
    }
}
