//! `csx gen`: seeded, reproducible, streaming data generators.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use csx_workloads::gen::{DataSpec, KINDS};

use crate::connect::parse_size;
use crate::{exit, GlobalArgs};

/// Generate test data: a kind (u32, u64, text, vectors, bitmap) or a workload's dataset.
///
/// The same kind, seed and size always give the same bytes. Data streams to the file
/// (or stdout) in chunks, with progress on stderr when it is a terminal.
///
/// Examples:
///   csx gen u64 --size 64MiB -o ints.bin
///   csx gen text --size 1GiB --seed 7 -o rows.txt
///   csx gen knn --size 16MiB -o vectors.bin && csx put vectors.bin /data/vectors
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct GenArgs {
    /// A kind (u32, u64, text, vectors, bitmap) or a workload name (`csx demo` lists them).
    #[arg(value_name = "KIND|WORKLOAD")]
    what: String,
    /// Bytes to generate (for bitmap: the decompressed size).
    #[arg(long, value_parser = parse_size)]
    size: u64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// File to write (default: stdout).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: GenArgs, _global: &GlobalArgs) -> anyhow::Result<u8> {
    let spec = match DataSpec::kind(&args.what) {
        Some(spec) => spec,
        None => match csx_workloads::by_name(&args.what) {
            Some(w) => (w.dataset)(),
            None => {
                let workloads: Vec<&str> =
                    csx_workloads::WORKLOADS.iter().map(|w| w.name).collect();
                bail!(
                    "unknown kind or workload {:?}; kinds: {}; workloads: {}",
                    args.what,
                    KINDS.join(", "),
                    workloads.join(", ")
                );
            }
        },
    };
    let mut out: Box<dyn std::io::Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: csx_host::Progress| {
        if tty {
            eprint!(
                "\r\x1b[Kgen {}: {}%",
                args.what,
                p.done_bytes * 100 / p.total_bytes.max(1)
            );
        }
    };
    spec.write(args.seed, args.size, &mut out, &mut progress)
        .with_context(|| format!("generating {}", args.what))?;
    out.flush().context("writing the output")?;
    if tty {
        eprintln!("\r\x1b[Kgen {}: done", args.what);
    }
    Ok(exit::SUCCESS)
}
