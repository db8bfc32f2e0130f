//! uBPF (github.com/iovisor/ubpf) as an optional peer of `csx bench vm`: its interpreter
//! (bounds checks on, its default) and its x86-64 JIT (no checks), each timed by a runner
//! process (`crates/bench/peers/ubpf/ubpf-run.c`, built against a uBPF checkout outside
//! this tree by `crates/bench/peers/ubpf/build.sh`).
//!
//! The bench gives the runner the kernel's raw bytecode and input in temporary files and
//! the answer native code returned; the runner checks one run against it, sizes its
//! batches like [`super::super::measure::Sampler`] does, and then, on each `run MS` line,
//! times batches itself and prints their nanoseconds per call. The bench interleaves
//! those stretches with its own columns, so every column sees the same load.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::Input;

/// Environment variable naming the runner, when `--peer ubpf=PATH` is not given.
pub const RUNNER_ENV: &str = "CSX_BENCH_UBPF";

/// Which uBPF engine a runner drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Interp,
    Jit,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Interp => "interp",
            Mode::Jit => "jit",
        }
    }
}

/// One runner process, loaded with one kernel in one mode and checked on its input.
pub struct Runner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Calls per timed batch, as the runner sized them.
    pub batch_calls: u64,
    /// The code and input files, removed when the runner is dropped.
    _files: tempfile::TempDir,
}

impl Runner {
    /// Starts `runner` on `code` (raw bytecode) and `input` in `mode`; the runner checks
    /// one run against `answer` before it reports ready.
    pub fn start(
        runner: &Path,
        mode: Mode,
        code: &[u8],
        input: &Input,
        answer: u64,
        batch: Duration,
        cpu_time: bool,
    ) -> anyhow::Result<Runner> {
        let files = tempfile::tempdir().context("creating a temporary directory")?;
        let code_path = files.path().join("kernel.bin");
        let input_path = files.path().join("input.bin");
        std::fs::write(&code_path, code).context("writing the bytecode")?;
        std::fs::write(&input_path, input.bytes()).context("writing the input")?;
        let mut child = Command::new(runner)
            .arg(mode.arg())
            .arg(&code_path)
            .arg(&input_path)
            .arg(format!("{answer:x}"))
            .arg(batch.as_nanos().max(1).to_string())
            .arg(if cpu_time { "cpu" } else { "wall" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", runner.display()))?;
        let stdin = child.stdin.take().context("the runner's stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("the runner's stdout")?);
        let mut runner = Runner {
            child,
            stdin: Some(stdin),
            stdout,
            batch_calls: 0,
            _files: files,
        };
        let line = runner.read_line()?;
        runner.batch_calls = match line.strip_prefix("ready ") {
            Some(calls) => calls
                .parse()
                .with_context(|| format!("the runner said {line:?}"))?,
            None => bail!("{}", line.strip_prefix("error ").unwrap_or(&line)),
        };
        Ok(runner)
    }

    /// Has the runner time batches for about `duration`; their nanoseconds per call.
    pub fn run_for(&mut self, duration: Duration) -> anyhow::Result<Vec<f64>> {
        let stdin = self.stdin.as_mut().context("the runner was closed")?;
        writeln!(stdin, "run {}", duration.as_millis().max(1))
            .and_then(|()| stdin.flush())
            .context("writing to the runner")?;
        let line = self.read_line()?;
        if let Some(wrong) = line.strip_prefix("wrong ") {
            bail!("{wrong} timed runs did not return the answer");
        }
        let Some(batches) = line.strip_prefix("batches") else {
            bail!("the runner said {line:?}");
        };
        let per_call: Vec<f64> = batches
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("the runner said {line:?}"))?;
        if per_call.is_empty() {
            bail!("the runner timed no batch");
        }
        Ok(per_call)
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .context("reading from the runner")?;
        if n == 0 {
            let status = self.child.wait().context("waiting for the runner")?;
            bail!("the runner exited ({status}) without a reply");
        }
        Ok(line.trim_end().to_string())
    }
}

impl Drop for Runner {
    /// Closes the runner's stdin (it exits at the end of input) and reaps it.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// uBPF's columns for one kernel: the interpreter, checked first, then the JIT, which
/// runs only if the bounds-checked interpreter returned the answer on the same bytes.
#[derive(Default)]
pub struct Columns {
    pub interp: Option<Runner>,
    pub jit: Option<Runner>,
    /// Why a column is missing.
    pub note: Option<String>,
}

impl Columns {
    pub fn start(
        runner: Option<&Path>,
        code: &Result<Vec<u8>, String>,
        input: &Input,
        answer: u64,
        batch: Duration,
        cpu_time: bool,
    ) -> Columns {
        let mut columns = Columns::default();
        let Some(runner) = runner else {
            return columns;
        };
        let code = match code {
            Ok(code) => code,
            Err(why) => {
                columns.note = Some(why.clone());
                return columns;
            }
        };
        match Runner::start(runner, Mode::Interp, code, input, answer, batch, cpu_time) {
            Ok(r) => columns.interp = Some(r),
            Err(e) => {
                columns.note = Some(format!(
                    "uBPF interpreter: {e:#}; the unchecked JIT was not run"
                ));
                return columns;
            }
        }
        match Runner::start(runner, Mode::Jit, code, input, answer, batch, cpu_time) {
            Ok(r) => columns.jit = Some(r),
            Err(e) => columns.note = Some(format!("uBPF JIT: {e:#}")),
        }
        columns
    }
}

/// The runner named by `--peer ubpf=PATH` or else [`RUNNER_ENV`], if any.
pub fn runner_path(peers: &[String]) -> anyhow::Result<Option<PathBuf>> {
    let mut found = None;
    for peer in peers {
        match peer.split_once('=') {
            Some(("ubpf", path)) if !path.is_empty() => found = Some(PathBuf::from(path)),
            _ => bail!("--peer {peer:?}: the peer this bench knows is ubpf=PATH (the runner built by crates/bench/peers/ubpf/build.sh)"),
        }
    }
    if found.is_none() {
        found = std::env::var_os(RUNNER_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
    }
    if let Some(path) = &found {
        if !path.is_file() {
            bail!(
                "the uBPF runner {} does not exist; build it with crates/bench/peers/ubpf/build.sh",
                path.display()
            );
        }
    }
    Ok(found)
}

#[cfg(test)]
pub(super) mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// Writes an executable shell script standing in for the runner.
    pub(crate) fn fake_runner(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("runner.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("writable");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn input() -> Input {
        Input::raw(&[1u8; 64])
    }

    /// The runner gets the mode, the files and the answer in hex, and its batches come
    /// back as numbers.
    #[test]
    fn a_runner_reports_its_batches() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let log = dir.path().join("args");
        let runner = fake_runner(
            dir.path(),
            &format!(
                "echo \"$1 $4 $(wc -c < \"$2\") $(wc -c < \"$3\") $6\" > {}\necho ready 3\n\
                 while read cmd ms; do echo batches 10.5 12; done",
                log.display()
            ),
        );
        let code = Ok(vec![0u8; 16]);
        let mut columns = Columns::start(
            Some(&runner),
            &code,
            &input(),
            0xabc,
            Duration::from_millis(1),
            true,
        );
        assert_eq!(columns.note, None);
        let jit = columns.jit.as_mut().expect("the JIT column starts");
        assert_eq!(jit.batch_calls, 3);
        assert_eq!(
            jit.run_for(Duration::from_millis(5)).expect("runs"),
            [10.5, 12.0]
        );
        let args = std::fs::read_to_string(&log).expect("the runner ran");
        assert_eq!(args.trim(), "jit abc 16 64 cpu");
    }

    /// A runner that refuses the program leaves a note naming why, and the unchecked
    /// JIT is not started; a runner whose timed runs go wrong is an error.
    #[test]
    fn runner_failures_are_reported() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let code = Ok(vec![0u8; 8]);
        let runner = fake_runner(dir.path(), "echo 'error ubpf_load: bad opcode'; exit 1");
        let columns = Columns::start(
            Some(&runner),
            &code,
            &input(),
            1,
            Duration::from_millis(1),
            false,
        );
        assert!(columns.interp.is_none() && columns.jit.is_none());
        let note = columns.note.expect("a note");
        assert!(note.contains("ubpf_load: bad opcode"), "{note}");
        assert!(note.contains("JIT was not run"), "{note}");

        let runner = fake_runner(dir.path(), "echo ready 1; read cmd; echo wrong 2");
        let mut r = Runner::start(
            &runner,
            Mode::Interp,
            &[0; 8],
            &input(),
            1,
            Duration::ZERO,
            false,
        )
        .expect("starts");
        let err = format!(
            "{:#}",
            r.run_for(Duration::from_millis(1)).expect_err("wrong")
        );
        assert!(err.contains("2 timed runs"), "{err}");

        let runner = fake_runner(dir.path(), "exit 0");
        let err = Runner::start(
            &runner,
            Mode::Jit,
            &[0; 8],
            &input(),
            1,
            Duration::ZERO,
            false,
        )
        .err()
        .expect("no reply");
        assert!(format!("{err:#}").contains("without a reply"), "{err:#}");

        let err = Columns::start(
            Some(&runner),
            &Err("no".into()),
            &input(),
            1,
            Duration::ZERO,
            false,
        );
        assert_eq!(err.note.as_deref(), Some("no"));
        assert!(
            Columns::start(None, &code, &input(), 1, Duration::ZERO, false)
                .note
                .is_none()
        );
    }

    #[test]
    fn the_runner_path_is_checked() {
        let err = runner_path(&["llvmbpf=/x".into()]).expect_err("unknown peer");
        assert!(format!("{err}").contains("ubpf=PATH"), "{err}");
        let err = runner_path(&["ubpf=/nonexistent/ubpf-run".into()]).expect_err("missing");
        assert!(format!("{err}").contains("does not exist"), "{err}");
        let dir = tempfile::tempdir().expect("temporary directory");
        let runner = fake_runner(dir.path(), "exit 0");
        let arg = format!("ubpf={}", runner.display());
        assert_eq!(runner_path(&[arg]).expect("exists"), Some(runner));
    }
}
