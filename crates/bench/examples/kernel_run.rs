//! Runs one `csx bench vm` kernel on one engine, for reading instruction counts under a
//! profiler: `kernel_run KERNEL RUNS [jit|quick|interp]` (jit when omitted).
//!
//! The kernel is the object `csx bench vm` runs (`sdk/bench/KERNEL.c`, built in) on its
//! full-size input (`csx_bench::kernels::input`), or with KERNEL `FILE.c:NAME` function
//! NAME of a `csx bench vm --kernels FILE.c` file on its input, mapped as the bench maps
//! it (r1 its address, r2 its length). The result is checked against the interpreter's; the runs
//! happen in `measured`, so a profiler can count only them
//! (`valgrind --tool=callgrind --toggle-collect='*measured*'`).

use std::sync::Arc;

use anyhow::{bail, Context as _};
use csx_bench::engine::{build_engine, verify_program, EngineKind};
use csx_bench::kernels;
use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::memory::{MemoryMap, RegionIdx};

#[inline(never)]
fn measured(engine: &dyn Engine, mem: &mut MemoryMap<'_>, args: [u64; 5], runs: u32) -> u64 {
    let opts = RunOptions::default();
    let mut r = 0;
    for _ in 0..runs {
        r = engine
            .run(mem, args, &opts, &mut ConformanceHost)
            .result
            .expect("the interpreter ran this kernel without a trap");
    }
    r
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(name), Some(runs)) = (args.get(1), args.get(2)) else {
        let names: Vec<&str> = kernels::all().iter().map(|k| k.name).collect();
        bail!(
            "usage: kernel_run KERNEL RUNS [jit|quick|interp]; kernels: {}",
            names.join(" ")
        );
    };
    let runs: u32 = runs.parse().context("RUNS is a number")?;
    let kind = match args.get(3).map_or("jit", String::as_str) {
        "jit" => EngineKind::Jit,
        "quick" => EngineKind::Quick,
        "interp" => EngineKind::Interp,
        other => bail!("unknown engine {other}: jit, quick or interp"),
    };
    // `FILE.c:NAME`: function NAME of a `csx bench vm --kernels` file, on its input.
    let (kernel, bytes) = match name.rsplit_once(':') {
        Some((file, name)) => {
            let kernel = kernels::from_file(std::path::Path::new(file))?
                .into_iter()
                .find(|k| k.name == name)
                .with_context(|| format!("no function {name} in {file}"))?;
            (kernel, kernels::file_input(name))
        }
        None => {
            let kernel = kernels::all()
                .into_iter()
                .find(|k| k.name == name)
                .with_context(|| format!("no kernel {name} in sdk/bench"))?;
            (kernel, kernels::input(name))
        }
    };
    let functions = Arc::new(FunctionTable::new());
    let program = csx_ebpf::loader::load_elf(kernel.bpf_object, Some(kernel.symbol), &functions)?;
    let program = verify_program(name, program, functions)?;

    let mut map = MemoryMap::new();
    let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &bytes)?;
    let r = [addr, bytes.len() as u64, 0, 0, 0];
    let (interp, _) = build_engine(EngineKind::Interp, Arc::clone(&program))?;
    let want = interp
        .run(&mut map, r, &RunOptions::default(), &mut ConformanceHost)
        .result
        .map_err(|trap| anyhow::anyhow!("the interpreter trapped: {}", trap.kind))?;
    let (engine, _) = build_engine(kind, program)?;
    let got = measured(engine.as_ref(), &mut map, r, runs);
    if got != want {
        bail!(
            "{} returned {got:#x}, the interpreter {want:#x}",
            kind.name()
        );
    }
    println!("{name} {got:#x}");
    Ok(())
}
