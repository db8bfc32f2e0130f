//! Entry facts: loads of the program's entry that the value ranges prove inside
//! `[r1, r1 + r2)` read without a check, in code that runs only after the run's start
//! found `r1` in a region readable for `r2` bytes; any other `r1` and `r2` run the plain
//! variant, compiled when a run first needs it. Both must match the interpreter in
//! value, trap (pc, address, kind), fuel at every budget, and memory.

use super::*;

/// Region 2: 64 writable bytes `0, 1, ...`; region 3: 16 read-only bytes `0x10, ...`.
/// Each run's `r1` and `r2` come from `args` given the two regions' addresses.
type Args = fn(u64, u64) -> (u64, u64);

fn run_with(engine: &dyn Engine, fuel: u64, args: Args) -> (RunOutcome, Vec<u8>) {
    let mut rw: Vec<u8> = (0..64).collect();
    let ro: Vec<u8> = (0x10..0x20).collect();
    let mut map = MemoryMap::new();
    let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
    let b = map.map_read_only(RegionIdx(3), &ro).unwrap();
    let (r1, r2) = args(a, b);
    let opts = RunOptions {
        fuel,
        ..RunOptions::default()
    };
    let out = engine.run(&mut map, [r1, r2, 0, 0, 0], &opts, &mut TestHost);
    (out, rw)
}

/// Every engine agrees with the interpreter with `args`, at every budget up to one past
/// what the run needs; returns the full run's outcome.
fn agree(p: &Arc<VerifiedProgram>, jit: &JitProgram, args: Args) -> RunOutcome {
    let interp = Interpreter::new(p.clone());
    #[cfg(target_arch = "x86_64")]
    let quick = QuickProgram::compile(p.clone()).unwrap();
    let (full, _) = run_with(&interp, u64::MAX, args);
    for fuel in (0..=full.fuel_used + 1).chain([u64::MAX]) {
        let want = run_with(&interp, fuel, args);
        assert_eq!(run_with(jit, fuel, args), want, "jit, fuel {fuel}");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run_with(&quick, fuel, args), want, "quick, fuel {fuel}");
    }
    full
}

/// Sums `r1[i]` for `i` below r2, stopping early at a byte equal to 40.
const SCAN: &str = "mov %r0, 0\nmov %r3, 0\nloop:\njge %r3, %r2, out\nmov %r4, %r1\n\
                    add %r4, %r3\nldxb %r5, [%r4+0]\njeq %r5, 40, out\nadd %r0, %r5\n\
                    add %r3, 1\nja loop\nout:\nexit";

const STACK_TOP: u64 = RegionIdx::STACK.vaddr(csx_ebpf::limits::STACK_SIZE as u32);

/// `r1` and `r2` that meet the precondition (a region readable for `r2` bytes from
/// `r1`: writable, read-only, the stack, nothing to read at all) and that do not (past a
/// region's end by one byte, an unmapped region, a length that wraps, a region index
/// past the table).
const MEETS: [Args; 7] = [
    |a, _| (a, 64),
    |a, _| (a + 60, 4),
    |a, _| (a + 64, 0),
    |a, _| (a + 17, 23),
    |_, b| (b, 16),
    |_, _| (STACK_TOP - 16, 16),
    |_, _| (0, 0),
];
const FAILS: [Args; 8] = [
    |a, _| (a, 65),
    |a, _| (a + 60, 5),
    |a, _| (a + 64, 1),
    |_, b| (b + 1, 16),
    |_, _| (RegionIdx(4).vaddr(0), 3),
    |a, _| (a, u64::MAX),
    |a, _| (a + 1, u64::MAX - 0x20),
    |_, _| (u64::MAX - 3, 2),
];

#[test]
fn a_scan_below_the_entry_length_reads_unchecked_where_the_precondition_holds() {
    let p = program(SCAN, vec![]);
    let jit = JitProgram::compile(p.clone()).unwrap();
    assert!(jit.code.needs_input(), "the scan's load is proven");
    for args in MEETS {
        agree(&p, &jit, args);
    }
    // No run has needed the plain variant yet.
    assert!(jit.plain.get().is_none());
    let out = agree(&p, &jit, |a, _| (a, 64));
    assert_eq!(out.result, Ok((0..40).sum()));
    for args in FAILS {
        agree(&p, &jit, args);
    }
    assert!(matches!(jit.plain.get(), Some(Ok(_))), "compiled on demand");
    // Past the region's end the plain variant traps where the interpreter does.
    let (out, _) = run_with(&jit, u64::MAX, |_, b| (b, 17));
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: RegionIdx(3).vaddr(16),
            size: 1,
            write: false
        }
    );
    assert_eq!(trap_of(&out).pc, 5);
}

#[test]
fn loads_the_facts_do_not_prove_stay_checked() {
    // The byte after `i` (at most `len`, not below it), a load before the compare, and
    // an index moved after it: each still traps at the region's end where the
    // interpreter does, with the precondition met.
    for src in [
        SCAN.replace("ldxb %r5, [%r4+0]", "ldxb %r5, [%r4+1]"),
        SCAN.replace(
            "loop:\njge %r3, %r2, out",
            "loop:\nldxb %r6, [%r1+64]\njge %r3, %r2, out",
        ),
        SCAN.replace("add %r4, %r3\n", "add %r4, %r3\nadd %r4, 1\n"),
    ] {
        let p = program(&src, vec![]);
        let jit = JitProgram::compile(p.clone()).unwrap();
        let out = agree(&p, &jit, |a, _| (a + 41, 23));
        assert!(
            matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }),
            "{src}"
        );
        for args in MEETS.into_iter().chain(FAILS) {
            agree(&p, &jit, args);
        }
    }
}

#[test]
fn no_entry_facts_with_helpers_stores_or_in_called_copies() {
    // A helper may remap regions: no facts, no precondition.
    let p = program(
        &SCAN.replace("out:\nexit", "out:\nmov %r6, %r0\ncall 1\nexit"),
        vec![],
    );
    let jit = JitProgram::compile(p.clone()).unwrap();
    assert!(!jit.code.needs_input());
    // Stores never use them: a read-only `r1` region traps at the store.
    let fill = "mov %r3, 0\nloop:\njge %r3, %r2, out\nmov %r4, %r1\nadd %r4, %r3\n\
                stxb [%r4+0], %r3\nadd %r3, 1\nja loop\nout:\nmov %r0, %r3\nexit";
    let p = program(fill, vec![]);
    let jit = JitProgram::compile(p.clone()).unwrap();
    assert!(!jit.code.needs_input());
    let out = agree(&p, &jit, |_, b| (b, 16));
    assert!(matches!(trap_of(&out).kind, TrapKind::ReadOnly { .. }));
    agree(&p, &jit, |a, _| (a + 8, 40));
    // The entry called by itself (here once, at the end, with r1 moved and r2 grown):
    // a called copy has no precondition behind it, so the entry has no facts at all.
    let recurse = format!(
        "start:\n{}",
        SCAN.replace(
            "out:\nexit",
            "out:\njne %r2, 16, done\nadd %r1, 8\nadd %r2, 40\ncall local start\ndone:\nexit",
        )
    );
    let p = program(&recurse, vec![]);
    let jit = JitProgram::compile(p.clone()).unwrap();
    assert!(!jit.code.needs_input());
    let out = agree(&p, &jit, |a, _| (a + 48, 16));
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
    for args in MEETS.into_iter().chain(FAILS) {
        agree(&p, &jit, args);
    }
}

/// A small deterministic generator (xorshift64*), for [`random_scans_match_the_interpreter`].
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A scan over the input in one of the shapes the entry facts reason about (a guard on
/// `i` or on `i + c` against r2, a rotated loop after a test of r2, a test of r2 against
/// a constant and a read at a constant offset), with random starts, steps, offsets and
/// sizes, some of which read past what the guard allows.
fn random_scan(rng: &mut Rng) -> String {
    let load = rng.pick(&["ldxb", "ldxh", "ldxw", "ldxdw"]);
    let k = rng.below(11) as i64 - 2;
    let start = rng.pick(&["0", "1", "3"]);
    let step = rng.pick(&["1", "2", "3"]);
    let c = rng.below(9);
    let body = format!(
        "mov %r5, %r1\nadd %r5, %r3\n{load} %r6, [%r5{k:+}]\nadd %r0, %r6\nadd %r3, {step}\n"
    );
    match rng.below(4) {
        0 => {
            let guard = rng.pick(&[
                "jge %r3, %r2, out",
                "jgt %r3, %r2, out",
                "jle %r2, %r3, out",
                "jge32 %r3, %r2, out",
            ]);
            format!("mov %r0, 0\nmov %r3, {start}\nloop:\n{guard}\n{body}ja loop\nout:\nexit")
        }
        1 => format!(
            "mov %r0, 0\nmov %r3, {start}\nloop:\nmov %r4, %r3\nadd %r4, {c}\n\
             jgt %r4, %r2, out\n{body}ja loop\nout:\nexit"
        ),
        2 => {
            let test = rng.pick(&["jeq %r2, 0, out", "jlt %r2, 4, out", "jle %r2, 2, out"]);
            format!(
                "mov %r0, 0\n{test}\nmov %r3, {start}\nloop:\n{body}\
                 jlt %r3, %r2, loop\nout:\nexit"
            )
        }
        _ => format!(
            "mov %r0, 0\njlt %r2, {}, out\nmov %r5, %r1\n{load} %r0, [%r5{k:+}]\nout:\nexit",
            c * 4
        ),
    }
}

#[test]
fn random_scans_match_the_interpreter() {
    let seed = std::env::var("CSX_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut rng = Rng(seed.unwrap_or(0x9e37_79b9_7f4a_7c15));
    let mut fast = 0;
    for case in 0..400 {
        let src = random_scan(&mut rng);
        let p = program(&src, vec![]);
        let jit = JitProgram::compile(p.clone()).unwrap();
        fast += usize::from(jit.code.needs_input());
        let interp = Interpreter::new(p.clone());
        for _ in 0..6 {
            let (off, len) = (rng.below(72), rng.below(80));
            let len = if rng.below(8) == 0 {
                u64::MAX - len
            } else {
                len
            };
            let run = |engine: &dyn Engine, fuel| {
                let mut rw: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(7) | 1).collect();
                let mut map = MemoryMap::new();
                let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
                let opts = RunOptions {
                    fuel,
                    ..RunOptions::default()
                };
                engine.run(&mut map, [a + off, len, 0, 0, 0], &opts, &mut TestHost)
            };
            let want = run(&interp, 10_000);
            assert_eq!(
                run(&jit, 10_000),
                want,
                "case {case} r2 {len} at +{off}\n{src}"
            );
            let fuel = rng.below(want.fuel_used + 2);
            assert_eq!(
                run(&jit, fuel),
                run(&interp, fuel),
                "case {case}, fuel {fuel}\n{src}"
            );
        }
    }
    // A fifth of them read unchecked (82 with this seed): not a 32-bit guard, a read
    // before `i` or past what the guard allows, or after a test that leaves too few bytes.
    assert!(
        fast >= 60,
        "{fast} of 400 programs read their input unchecked"
    );
}

#[test]
fn threads_meeting_and_failing_the_precondition_at_once_agree() {
    // The plain variant is compiled by whichever run first fails the precondition,
    // while other threads run the fast code: every run still matches the interpreter.
    let p = program(SCAN, vec![]);
    let jit = Arc::new(JitProgram::compile(p.clone()).unwrap());
    assert!(jit.code.needs_input());
    let interp = Interpreter::new(p);
    let cases: Vec<(Args, (RunOutcome, Vec<u8>))> = MEETS
        .into_iter()
        .chain(FAILS)
        .map(|args| (args, run_with(&interp, 10_000, args)))
        .collect();
    let cases = Arc::new(cases);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (jit, cases) = (Arc::clone(&jit), Arc::clone(&cases));
            std::thread::spawn(move || {
                for i in 0..60 {
                    let (args, want) = &cases[(i * 7 + t * 3) % cases.len()];
                    assert_eq!(
                        &run_with(jit.as_ref(), 10_000, *args),
                        want,
                        "thread {t} run {i}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(matches!(jit.plain.get(), Some(Ok(_))));
}
