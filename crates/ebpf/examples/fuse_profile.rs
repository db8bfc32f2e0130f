//! Which instruction sequences the interpreter runs most, kernel by kernel: the counts
//! its fused ops are picked from. `fuse_profile DIR [--top N]` over the kernels
//! `csx-bench`'s `kernel_dump DIR [FILE.c ...]` wrote (the built-in `csx bench vm`
//! kernels and every function of each FILE.c, with their full-size inputs), or
//! `fuse_profile DIR --run KERNEL RUNS` to run one kernel under a profiler (the runs
//! happen in `measured`: `valgrind --tool=callgrind --toggle-collect='*measured*'`).
//!
//! Each kernel runs once on the interpreter with block counters on, its input mapped
//! read-only (r1 its address, r2 its length). A slot runs as often as its block is
//! entered, so the counters give:
//!
//! - per kernel, the instructions run and the dispatches the fused decoding makes for
//!   them (walking each block from its leader through [`Interpreter::decoded_ops`]; a
//!   fused op that runs into the next block is counted once, in its own block);
//! - the most frequent adjacent pairs and triples of dispatched ops, each kernel
//!   weighted equally (a sequence's score is the sum over kernels of its share of that
//!   kernel's dispatches), with the unfused ops written as instruction shapes
//!   (registers renamed `a`, `b`, ... in order of use, `fp` for r10, immediates kept
//!   only for shifts and masks);
//! - the same over the plain instruction stream (2 to 4 instructions), whatever is
//!   fused now.

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;
use std::sync::Arc;

use csx_ebpf::count::ExecCounts;
use csx_ebpf::disasm::format_insn;
use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::isa::{Insn, CLASS_JMP, CLASS_JMP32, OP_LDDW};
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::VerifiedProgram;

type Res<T> = Result<T, Box<dyn Error>>;

/// A kernel as `kernel_dump` wrote it.
struct Kernel {
    set: String,
    name: String,
    program: Arc<VerifiedProgram>,
    input: Vec<u8>,
}

/// One kernel's profile: instructions run, dispatches, and its weighted sequences.
struct Profile {
    name: String,
    insns: u64,
    dispatches: u64,
    /// Dispatched-op sequences (length 2 and 3) with their share of the dispatches.
    fused: HashMap<String, f64>,
    /// Plain instruction sequences (length 2 to 4) with their share of the instructions.
    plain: HashMap<String, f64>,
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .ok_or("usage: fuse_profile DIR [--top N | --run KERNEL RUNS]")?;
    let kernels = load(Path::new(dir))?;
    if args.get(1).map(String::as_str) == Some("--run") {
        let name = args.get(2).ok_or("--run KERNEL RUNS")?;
        let runs: u32 = args.get(3).ok_or("--run KERNEL RUNS")?.parse()?;
        let k = kernels
            .iter()
            .find(|k| &k.name == name)
            .ok_or_else(|| format!("no kernel {name} in {dir}"))?;
        let interp = Interpreter::new(Arc::clone(&k.program));
        let mut map = MemoryMap::new();
        let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &k.input)?;
        let r = [addr, k.input.len() as u64, 0, 0, 0];
        println!("{name} {:#x}", measured(&interp, &mut map, r, runs)?);
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("--hot") {
        let name = args.get(2).ok_or("--hot KERNEL")?;
        for k in kernels.iter().filter(|k| &k.name == name) {
            hot(k)?;
        }
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("--kinds") {
        return kinds(&kernels);
    }
    let top = match args.get(1).map(String::as_str) {
        Some("--top") => args.get(2).ok_or("--top N")?.parse()?,
        _ => 30,
    };
    let mut sets: Vec<(String, Vec<Profile>)> = Vec::new();
    for k in &kernels {
        let p = profile(k)?;
        match sets.last_mut() {
            Some((s, v)) if *s == k.set => v.push(p),
            _ => sets.push((k.set.clone(), vec![p])),
        }
    }
    for (set, profiles) in &sets {
        report(set, profiles, top);
    }
    Ok(())
}

#[inline(never)]
fn measured(interp: &Interpreter, mem: &mut MemoryMap<'_>, args: [u64; 5], runs: u32) -> Res<u64> {
    let mut r = 0;
    for _ in 0..runs {
        let out = interp.run(mem, args, &RunOptions::default(), &mut ConformanceHost);
        r = out.result.map_err(|t| t.kind.to_string())?;
    }
    Ok(r)
}

/// The kernels `kernel_dump` wrote into `dir`, in its order.
fn load(dir: &Path) -> Res<Vec<Kernel>> {
    let index = std::fs::read_to_string(dir.join("index.tsv"))?;
    let mut out = Vec::new();
    for line in index.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [set, name, symbol, n] = f[..] else {
            return Err(format!("bad index line {line:?}").into());
        };
        let object = std::fs::read(dir.join(format!("{n}.o")))?;
        let functions = Arc::new(FunctionTable::new());
        let program = csx_ebpf::loader::load_elf(&object, Some(symbol), &functions)?;
        let program = csx_ebpf::verifier::verify(program, functions)?;
        out.push(Kernel {
            set: set.to_string(),
            name: name.to_string(),
            program: Arc::new(program),
            input: std::fs::read(dir.join(format!("{n}.in")))?,
        });
    }
    Ok(out)
}

/// Prints `k`'s blocks that run the most instructions, slot by slot with the op each
/// slot's dispatch runs.
fn hot(k: &Kernel) -> Res<()> {
    let counts = block_counts(k)?;
    let interp = Interpreter::new(Arc::clone(&k.program));
    let ops = interp.decoded_ops();
    let insns = k.program.insns();
    let mut bl = blocks(&k.program, &counts);
    bl.sort_by_key(|&(s, e, c)| std::cmp::Reverse(c * (e - s) as u64));
    for &(start, end, c) in bl.iter().take(8) {
        println!("block {start}..{end} x{c}");
        for (s, (kind, _)) in ops.iter().enumerate().take(end).skip(start) {
            println!("  {s:>5} {:<40} {kind}", format_insn(insns, s));
        }
    }
    Ok(())
}

/// `k`'s block counts over one run on its input.
fn block_counts(k: &Kernel) -> Res<Vec<u64>> {
    let mut map = MemoryMap::new();
    let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &k.input)?;
    let counts = ExecCounts::new(k.program.blocks());
    let opts = RunOptions {
        counts: Some(&counts),
        ..RunOptions::default()
    };
    let interp = Interpreter::new(Arc::clone(&k.program));
    let r = [addr, k.input.len() as u64, 0, 0, 0];
    let out = interp.run(&mut map, r, &opts, &mut ConformanceHost);
    out.result
        .map_err(|t| format!("{} trapped: {}", k.name, t.kind))?;
    Ok(counts.values())
}

fn profile(k: &Kernel) -> Res<Profile> {
    let counts = block_counts(k)?;
    let interp = Interpreter::new(Arc::clone(&k.program));
    Ok(weigh(&k.name, &k.program, &interp, &counts))
}

/// Prints, for every op the dispatch loop runs on the kernels, its dispatches in each
/// set and how many kernels run it: which fused ops earn their place in the loop.
fn kinds(kernels: &[Kernel]) -> Res<()> {
    // op -> set -> (dispatches, kernels that run it)
    let mut all: HashMap<String, HashMap<String, (u64, u32)>> = HashMap::new();
    let mut sets: Vec<String> = Vec::new();
    for k in kernels {
        if !sets.contains(&k.set) {
            sets.push(k.set.clone());
        }
        let counts = block_counts(k)?;
        let interp = Interpreter::new(Arc::clone(&k.program));
        for (op, n) in dispatch_counts(&k.program, &interp, &counts) {
            let e = all.entry(op).or_default().entry(k.set.clone()).or_default();
            e.0 += n;
            e.1 += 1;
        }
    }
    let mut rows: Vec<_> = all.into_iter().collect();
    rows.sort_by_key(|(_, by)| std::cmp::Reverse(by.values().map(|v| v.0).sum::<u64>()));
    for (op, by) in rows {
        let cells: Vec<String> = sets
            .iter()
            .map(|s| {
                let (n, k) = by.get(s).copied().unwrap_or_default();
                format!("{n:>12} {k:>3}")
            })
            .collect();
        println!("{op:<28} {}", cells.join(" | "));
    }
    println!("sets: {}", sets.join(" | "));
    Ok(())
}

/// How often each op (by kind name) is dispatched over a run with block counts `counts`:
/// walking each entered block from its leader as [`weigh`] does.
fn dispatch_counts(
    program: &VerifiedProgram,
    interp: &Interpreter,
    counts: &[u64],
) -> HashMap<String, u64> {
    let insns = program.insns();
    let ops = interp.decoded_ops();
    let mut out: HashMap<String, u64> = HashMap::new();
    for (start, end, c) in blocks(program, counts) {
        let covered = start > 0 && ops[start - 1].0.ends_with("IJa")
            || start > 1
                && ops[start - 2].0.starts_with("MovJ")
                && ops[start - 2].0.ends_with("IJa");
        if c == 0 || covered {
            continue;
        }
        let mut s = start;
        while s < end {
            let (kind, span) = &ops[s];
            *out.entry(kind.clone()).or_default() += c;
            s += if *span == 1 && insns[s].opc == OP_LDDW {
                2
            } else {
                *span
            };
        }
    }
    out
}

/// The slot ranges of each block with its count.
fn blocks(program: &VerifiedProgram, counts: &[u64]) -> Vec<(usize, usize, u64)> {
    let leaders = program.blocks().leaders();
    let n = program.insns().len();
    leaders
        .iter()
        .enumerate()
        .map(|(b, &l)| {
            let end = leaders.get(b + 1).map_or(n, |&e| e as usize);
            (l as usize, end, counts[b])
        })
        .collect()
}

fn weigh(name: &str, program: &VerifiedProgram, interp: &Interpreter, counts: &[u64]) -> Profile {
    let insns = program.insns();
    let ops = interp.decoded_ops();
    let blocks = blocks(program, counts);
    let mut total = 0u64;
    let mut dispatches = 0u64;
    let mut fused_raw: HashMap<String, u64> = HashMap::new();
    let mut plain_raw: HashMap<String, u64> = HashMap::new();
    for &(start, end, c) in &blocks {
        if c == 0 {
            continue;
        }
        let slots: Vec<usize> = (start..end)
            .filter(|&s| s == start || insns[s - 1].opc != OP_LDDW)
            .collect();
        total += c * slots.len() as u64;
        for n in 2..=4 {
            for w in slots.windows(n) {
                *plain_raw.entry(shape(insns, w)).or_default() += c;
            }
        }
        // A `ja` run inside the exit-test op before it is no dispatch of its own.
        let covered = start > 0 && ops[start - 1].0.ends_with("IJa")
            || start > 1
                && ops[start - 2].0.starts_with("MovJ")
                && ops[start - 2].0.ends_with("IJa");
        if covered {
            continue;
        }
        // Dispatched ops: a slot, and the fused kind's name if fused.
        let mut seq: Vec<(usize, Option<&str>)> = Vec::new();
        let mut s = start;
        while s < end {
            let (kind, span) = &ops[s];
            seq.push((s, (*span > 1).then_some(kind.as_str())));
            // An `lddw` runs both its slots.
            s += if *span == 1 && insns[s].opc == OP_LDDW {
                2
            } else {
                *span
            };
        }
        dispatches += c * seq.len() as u64;
        for n in 2..=3 {
            for w in seq.windows(n) {
                *fused_raw.entry(dispatched(insns, w)).or_default() += c;
            }
        }
    }
    let share = |m: HashMap<String, u64>, of: u64| {
        m.into_iter()
            .map(|(k, v)| (k, v as f64 / of.max(1) as f64))
            .collect()
    };
    Profile {
        name: name.to_string(),
        insns: total,
        dispatches,
        fused: share(fused_raw, dispatches),
        plain: share(plain_raw, total),
    }
}

/// Dispatched ops: fused ones by kind, the others as instructions, registers renamed
/// in order of use across the unfused ones.
fn dispatched(insns: &[Insn], ops: &[(usize, Option<&str>)]) -> String {
    let mut names: Vec<String> = Vec::new();
    let parts: Vec<String> = ops
        .iter()
        .map(|&(s, kind)| match kind {
            Some(k) => format!("[{k}]"),
            None => canonical(insns, s, &mut names),
        })
        .collect();
    parts.join(" ; ")
}

/// The instructions at `slots`, registers renamed in order of use.
fn shape(insns: &[Insn], slots: &[usize]) -> String {
    let mut names: Vec<String> = Vec::new();
    let mut parts = Vec::new();
    for &s in slots {
        parts.push(canonical(insns, s, &mut names));
    }
    parts.join(" ; ")
}

fn canonical(insns: &[Insn], s: usize, names: &mut Vec<String>) -> String {
    let text = format_insn(insns, s);
    let op = text.split(' ').next().unwrap_or("").to_string();
    let keep_imm = ["lsh", "rsh", "arsh", "and"]
        .iter()
        .any(|p| op.starts_with(p));
    let is_jump = matches!(insns[s].class(), CLASS_JMP | CLASS_JMP32);
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        if ch == '%' && chars.get(i + 1) == Some(&'r') {
            let mut j = i + 2;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            let reg: String = chars[i + 2..j].iter().collect();
            if reg == "10" {
                out.push_str("fp");
            } else {
                let idx = names.iter().position(|n| *n == reg).unwrap_or_else(|| {
                    names.push(reg.clone());
                    names.len() - 1
                });
                out.push((b'a' + idx as u8) as char);
            }
            i = j;
        } else if (ch.is_ascii_digit() || ch == '-' || ch == '+')
            && i > op.len()
            && !chars[i - 1].is_ascii_alphanumeric()
        {
            let mut j = i + 1;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric()) {
                j += 1;
            }
            let in_mem = out.ends_with(|c: char| c.is_ascii_lowercase()) && out.contains('[');
            if in_mem {
                out.push('o');
            } else if is_jump && (ch == '+' || ch == '-') && j == chars.len() {
                out.push_str(if ch == '-' { "back" } else { "fwd" });
            } else if keep_imm {
                out.extend(&chars[i..j]);
            } else {
                out.push('K');
            }
            i = j;
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// A sequence's score over a set, and each kernel's share in it.
type Scored<'a> = (f64, Vec<(f64, &'a str)>);

fn report(set: &str, profiles: &[Profile], top: usize) {
    println!("== {set}: {} kernels", profiles.len());
    println!(
        "{:<14} {:>12} {:>12} {:>6}",
        "kernel", "insns", "dispatches", "i/d"
    );
    for p in profiles {
        println!(
            "{:<14} {:>12} {:>12} {:>6.3}",
            p.name,
            p.insns,
            p.dispatches,
            p.insns as f64 / p.dispatches.max(1) as f64
        );
    }
    let sum_i: u64 = profiles.iter().map(|p| p.insns).sum();
    let sum_d: u64 = profiles.iter().map(|p| p.dispatches).sum();
    println!("{:<14} {sum_i:>12} {sum_d:>12}", "total");
    for (title, pick) in [
        ("dispatched sequences", 0),
        ("plain instruction sequences", 1),
    ] {
        let mut all: HashMap<&str, Scored<'_>> = HashMap::new();
        for p in profiles {
            let m = if pick == 0 { &p.fused } else { &p.plain };
            for (k, &v) in m {
                let e = all.entry(k.as_str()).or_default();
                e.0 += v;
                e.1.push((v, p.name.as_str()));
            }
        }
        let mut rows: Vec<_> = all.into_iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        println!("-- {set}: {title} (sum over kernels of the share, top kernels)");
        for (k, (score, mut by)) in rows.into_iter().take(top) {
            by.sort_by(|a, b| b.0.total_cmp(&a.0));
            let who: Vec<String> = by
                .iter()
                .take(4)
                .map(|(v, n)| format!("{n} {:.0}%", v * 100.0))
                .collect();
            println!("{score:>6.3}  {k}   [{}]", who.join(", "));
        }
    }
}
