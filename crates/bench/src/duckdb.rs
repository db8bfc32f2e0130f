//! DuckDB on the host, timed beside csx: one python3 (`$CSX_PYTHON` if set) kept running
//! for a whole benchmark, so a query's time is DuckDB's alone (no interpreter start, no
//! import), and runs can be interleaved with csx's one by one.
//!
//! The process holds two connections with `threads` threads each: `parquet` reads the
//! dataset's Parquet copy (one view per file, named after it; the OS page cache keeps
//! the files warm after the first run) and `memory` DuckDB's own tables loaded from it.
//! Each request is one line `{"source": "parquet"|"memory", "sql": ...}`; each answer one
//! line `{"ns": ..., "rows": ...}` or `{"error": ...}`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

const SCRIPT: &str = r#"
import json, os, sys, time
try:
    import duckdb
except ImportError as e:
    sys.exit(f"duckdb is missing ({e}); run scripts/setup.sh")
d, threads = sys.argv[1], int(sys.argv[2])
pq = duckdb.connect()
mem = duckdb.connect()
for con in (pq, mem):
    con.execute(f"SET threads = {threads}")
    con.execute("SET enable_progress_bar = false")
for f in sorted(os.listdir(d)):
    if f.endswith('.parquet'):
        src = f"read_parquet('{os.path.join(d, f)}')"
        pq.execute(f"CREATE VIEW \"{f[:-8]}\" AS SELECT * FROM {src}")
        mem.execute(f"CREATE TABLE \"{f[:-8]}\" AS SELECT * FROM {src}")
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    con = pq if req["source"] == "parquet" else mem
    try:
        t = time.perf_counter_ns()
        rows = con.execute(req["sql"]).fetchall()
        ns = time.perf_counter_ns() - t
        print(json.dumps({"ns": ns, "rows": len(rows)}), flush=True)
    except Exception as e:
        print(json.dumps({"error": str(e)}), flush=True)
"#;

/// Where DuckDB reads a query's tables from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The Parquet copy on the host's file system.
    Parquet,
    /// DuckDB's own in-memory tables.
    Memory,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Parquet => "parquet",
            Source::Memory => "memory",
        }
    }
}

/// One DuckDB timing.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    pub ns: u64,
    pub rows: u64,
}

/// A running DuckDB (see the module doc); killed when dropped.
pub struct DuckDb {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl DuckDb {
    /// Starts DuckDB over the Parquet files in `parquet_dir` with `threads` threads.
    pub fn start(parquet_dir: &Path, threads: u32) -> anyhow::Result<DuckDb> {
        let python = std::env::var("CSX_PYTHON").unwrap_or_else(|_| "python3".to_string());
        let mut child = Command::new(&python)
            .arg("-c")
            .arg(SCRIPT)
            .arg(parquet_dir)
            .arg(threads.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {python} for DuckDB (scripts/setup.sh)"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut db = DuckDb {
            child,
            stdin,
            stdout,
        };
        let ready = db.answer()?;
        if ready.get("ready") != Some(&Value::Bool(true)) {
            bail!("DuckDB did not start: {ready}");
        }
        Ok(db)
    }

    fn answer(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).context("reading DuckDB")?;
        if n == 0 {
            bail!("DuckDB's python exited (its error is above)");
        }
        serde_json::from_str(&line).with_context(|| format!("DuckDB printed {line:?}"))
    }

    /// Runs `sql` on `source` once; its time inside DuckDB.
    pub fn time(&mut self, source: Source, sql: &str) -> anyhow::Result<Timed> {
        let req = json!({"source": source.name(), "sql": sql});
        writeln!(self.stdin, "{req}").context("writing to DuckDB")?;
        self.stdin.flush().context("writing to DuckDB")?;
        let a = self.answer()?;
        if let Some(e) = a.get("error") {
            bail!("DuckDB failed on {sql:?}: {e}");
        }
        let field = |k: &str| a.get(k).and_then(Value::as_u64);
        match (field("ns"), field("rows")) {
            (Some(ns), Some(rows)) => Ok(Timed { ns, rows }),
            _ => bail!("DuckDB answered {a}"),
        }
    }
}

impl Drop for DuckDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
