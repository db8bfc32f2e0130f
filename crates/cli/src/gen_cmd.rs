//! `csx gen`: seeded, reproducible, streaming data generators.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use csx_workloads::gen::{DataSpec, KINDS};

use crate::connect::parse_size;
use crate::exit;

/// Generate test data: a kind (u32, u64, text, vectors, bitmap), a workload's dataset, or
/// a benchmark's tables (ssb, tpch).
///
/// The same kind, seed and size always give the same bytes. Data streams to the file
/// (or stdout) in chunks, with progress on stderr when it is a terminal.
///
/// `ssb` and `tpch` write columnar tables (docs/design/columnar.md): a directory per
/// table under --out with schema.json, one NAME.col file per column (fixed-width
/// little-endian) and NAME.dict beside each dictionary-encoded string column.
/// SSB: lineorder, customer, supplier, part, date. TPC-H: orders, lineitem.
/// --parquet DIR also writes DIR/TABLE.parquet (needs python3 with pyarrow:
/// scripts/setup.sh installs it), the copy the DuckDB oracle reads.
///
/// Examples:
///   csx gen u64 --size 64MiB -o ints.bin
///   csx gen text --size 1GiB --seed 7 -o rows.txt
///   csx gen knn --size 16MiB -o vectors.bin && csx put vectors.bin /data/vectors
///   csx gen ssb --sf 1 --out data/ssb --parquet data/ssb-parquet
///   csx gen tpch --sf 0.01 --out data/tpch && csx put -r data/tpch /tpch
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct GenArgs {
    /// A kind (u32, u64, text, vectors, bitmap) or a workload name (`csx demo` lists them).
    #[arg(value_name = "KIND|WORKLOAD")]
    what: String,
    /// Bytes to generate (for bitmap: the decompressed size). Kinds and workloads only.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Scale factor of ssb or tpch (1 = the benchmarks' SF 1; fractions such as 0.01
    /// make small test sets).
    #[arg(long, value_name = "N")]
    sf: Option<f64>,
    /// Directory for the tables of ssb or tpch.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// With ssb or tpch: also write a Parquet copy of each table to DIR.
    #[arg(long, value_name = "DIR")]
    parquet: Option<PathBuf>,
    /// With ssb or tpch: print a JSON summary {benchmark, sf, seed, tables, ...}.
    #[arg(long)]
    json: bool,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// File to write (default: stdout).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: GenArgs) -> anyhow::Result<u8> {
    if matches!(args.what.as_str(), "ssb" | "tpch") {
        return crate::data_cmd::gen_benchmark(
            &args.what,
            args.sf,
            args.out.as_deref(),
            args.parquet.as_deref(),
            args.seed,
            args.json,
        );
    }
    if args.sf.is_some() || args.out.is_some() || args.parquet.is_some() || args.json {
        bail!("--sf, --out, --parquet and --json go with `csx gen ssb` and `csx gen tpch`");
    }
    let Some(size) = args.size else {
        bail!("csx gen {} needs --size (e.g. --size 64MiB)", args.what);
    };
    let spec = match DataSpec::kind(&args.what) {
        Some(spec) => spec,
        None => match csx_workloads::by_name(&args.what) {
            Some(w) => (w.dataset)(),
            None => {
                let workloads: Vec<&str> =
                    csx_workloads::WORKLOADS.iter().map(|w| w.name).collect();
                bail!(
                    "unknown kind or workload {:?}; kinds: {}, ssb, tpch; workloads: {}",
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
    spec.write(args.seed, size, &mut out, &mut progress)
        .with_context(|| format!("generating {}", args.what))?;
    out.flush().context("writing the output")?;
    if tty {
        eprintln!("\r\x1b[Kgen {}: done", args.what);
    }
    Ok(exit::SUCCESS)
}
