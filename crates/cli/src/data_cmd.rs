//! The data pipeline commands of csx-data: `csx gen ssb|tpch` (called from `gen_cmd`)
//! and `csx put -r` (called from `files`).

use std::io::IsTerminal as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context as _};
use serde_json::json;

use crate::connect;
use crate::files::ProgressLine;
use crate::{exit, GlobalArgs};

/// `csx gen ssb|tpch --sf N --out DIR [--parquet DIR]`.
pub fn gen_benchmark(
    what: &str,
    sf: Option<f64>,
    out: Option<&Path>,
    parquet: Option<&Path>,
    seed: u64,
    json_out: bool,
) -> anyhow::Result<u8> {
    let Some(sf) = sf else {
        bail!("csx gen {what} needs --sf N (a scale factor, e.g. 1 or 0.01)");
    };
    let Some(out) = out else {
        bail!("csx gen {what} needs --out DIR (one directory per table is written there)");
    };
    let tty = std::io::stderr().is_terminal();
    let mut last = Instant::now();
    let mut progress = |table: &str, done: u64, total: u64| {
        if tty && (done == total || last.elapsed().as_millis() >= 100) {
            last = Instant::now();
            eprint!("\r\x1b[Kgen {what} {table}: {}%", done * 100 / total.max(1));
        }
    };
    let started = Instant::now();
    let dataset = match what {
        "ssb" => csx_data::ssb::gen::generate(out, sf, seed, &mut progress),
        _ => csx_data::tpch::generate(out, sf, seed, &mut progress),
    }
    .with_context(|| format!("generating {what} at SF {sf} into {}", out.display()))?;
    if tty {
        eprintln!("\r\x1b[Kgen {what}: done");
    }
    if let Some(pq) = parquet {
        if tty {
            eprintln!("gen {what}: writing the Parquet copy to {}", pq.display());
        }
        csx_data::parquet::write_parquet(out, pq)
            .with_context(|| format!("writing the Parquet copy to {}", pq.display()))?;
    }
    if json_out {
        let tables: Vec<_> = dataset
            .tables
            .iter()
            .map(|(t, rows)| json!({ "table": t, "rows": rows }))
            .collect();
        println!(
            "{}",
            crate::output::Json(
                json!({ "benchmark": what, "sf": sf, "seed": seed, "out": out, "tables": tables,
                    "parquet": parquet, "elapsed_ns": started.elapsed().as_nanos() as u64 })
            )
        );
    } else {
        for (t, rows) in &dataset.tables {
            println!("{t:<10} {rows:>12} rows  {}", out.join(t).display());
        }
        if let Some(pq) = parquet {
            println!("parquet    {}", pq.display());
        }
    }
    Ok(exit::SUCCESS)
}

/// `csx put -r LOCAL_DIR DEVDIR`.
pub fn put_recursive(
    local: &Path,
    dev_dir: &str,
    json_out: bool,
    global: &GlobalArgs,
) -> anyhow::Result<u8> {
    let dev = connect::open(global)?;
    let started = Instant::now();
    let mut line: Option<(String, ProgressLine)> = None;
    let summary = csx_data::put::put_dir(&dev, local, dev_dir, &mut |path, p| {
        if line.as_ref().is_none_or(|(l, _)| l != path) {
            if let Some((_, old)) = &line {
                old.finish();
            }
            line = Some((path.to_string(), ProgressLine::new(format!("put {path}"))));
        }
        if let Some((_, l)) = &mut line {
            l.update(p);
        }
    });
    if let Some((_, l)) = &line {
        l.finish();
    }
    let summary =
        summary.with_context(|| format!("cannot put {} to {dev_dir}", local.display()))?;
    dev.close().context("closing the device")?;
    let elapsed = started.elapsed();
    if json_out {
        println!(
            "{}",
            crate::output::Json(
                json!({ "path": dev_dir, "files": summary.files, "dirs": summary.dirs,
                    "bytes": summary.bytes, "elapsed_ns": elapsed.as_nanos() as u64 })
            )
        );
    } else {
        println!(
            "put {dev_dir}: {} files in {} directories, {} in {:.3} s",
            summary.files,
            summary.dirs,
            connect::format_size(summary.bytes),
            elapsed.as_secs_f64()
        );
    }
    Ok(exit::SUCCESS)
}
