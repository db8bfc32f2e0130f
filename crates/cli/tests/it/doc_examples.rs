//! The shell examples of README.md and docs/ run as written, on embedded devices (the
//! Python examples of python/README.md run in `python/tests/test_readme.py`, the same
//! way).
//!
//! Every ```sh block must follow a marker line, so none is skipped silently:
//! * `<!-- example: run ... -->`: run with bash (`set -e`), with the built `csx` first on
//!   PATH, in a scratch HOME and working directory;
//! * `<!-- example: daemon ... -->`: started in the background before the next `run`
//!   block, and stopped after the file's blocks;
//! * `<!-- example: excluded: WHY -->`: not run, for the reason given.
//!
//! `myprog.c` in an example is the SDK's stats64 program.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[derive(Debug, PartialEq)]
enum Mark {
    Run,
    /// With the device URI that answers once it is up (`ready: URI`).
    Daemon(String),
    Excluded,
}

/// The ```sh blocks of a Markdown text with their markers.
fn blocks(text: &str, file: &str) -> Vec<(Mark, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    let mut last_marker: Option<Mark> = None;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("<!-- example: ") {
            last_marker = Some(if rest.starts_with("run") {
                Mark::Run
            } else if rest.starts_with("daemon") {
                let uri = rest
                    .split("ready: ")
                    .nth(1)
                    .and_then(|r| r.split([';', ')', ' ']).next())
                    .unwrap_or_else(|| panic!("{file}: a daemon marker names no `ready: URI`"));
                Mark::Daemon(uri.to_string())
            } else if rest.starts_with("excluded: ") && rest.len() > "excluded: -->".len() {
                Mark::Excluded
            } else {
                panic!("{file}: unknown example marker {t:?}");
            });
            continue;
        }
        if t == "```sh" {
            let mark = last_marker
                .take()
                .unwrap_or_else(|| panic!("{file}: a ```sh block without an example marker"));
            let mut body = String::new();
            for l in lines.by_ref() {
                if l.trim() == "```" {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            out.push((mark, body));
        } else if !t.is_empty() {
            last_marker = None;
        }
    }
    out
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shell(home: &Path, bin: &Path, script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(home)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env_remove("CSX_DEVICE")
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        );
    cmd
}

fn run_file(rel: &str) -> usize {
    let text = std::fs::read_to_string(repo().join(rel)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_csx"))
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::copy(
        repo().join("sdk/programs/stats64.c"),
        home.path().join("myprog.c"),
    )
    .unwrap();
    let mut daemons: Vec<Child> = Vec::new();
    let mut prelude = String::new();
    let mut ran = 0;
    for (mark, body) in blocks(&text, rel) {
        match mark {
            Mark::Excluded => {}
            Mark::Daemon(uri) => {
                let child = shell(home.path(), &bin, &format!("{prelude}exec {}", body.trim()))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                daemons.push(child);
                let up = (0..600).any(|_| {
                    let ok = shell(
                        home.path(),
                        &bin,
                        &format!("{prelude}csx device info --device {uri}"),
                    )
                    .output()
                    .is_ok_and(|o| o.status.success());
                    if !ok {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    ok
                });
                assert!(
                    up,
                    "{rel}: the daemon example did not answer on {uri}:\n{body}"
                );
            }
            Mark::Run => {
                let out = shell(home.path(), &bin, &format!("{prelude}{body}"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{rel}: example failed ({}):\n{body}\nstdout:\n{}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                // Exports carry over to the next block, as in one terminal.
                for line in body.lines().filter(|l| l.starts_with("export ")) {
                    prelude.push_str(line);
                    prelude.push('\n');
                }
                ran += 1;
            }
        }
    }
    for mut d in daemons {
        let _ = d.kill();
        let _ = d.wait();
    }
    ran
}

#[test]
fn readme_examples_run() {
    assert!(run_file("README.md") >= 2, "README.md runs no example");
}

#[test]
fn cli_md_examples_run() {
    assert!(run_file("docs/cli.md") >= 1, "docs/cli.md runs no example");
}

#[test]
fn security_md_examples_run() {
    assert!(
        run_file("docs/security.md") >= 2,
        "docs/security.md runs no example"
    );
}

/// The Markdown files whose shell examples the tests above run.
const RUN_HERE: &[&str] = &["README.md", "docs/cli.md", "docs/security.md"];

/// Every Markdown file of the repository's documentation with a ```sh or ```python
/// block is run by a test: here, or python/README.md by the Python suite. A new file
/// with examples fails this until a test runs it.
#[test]
fn every_document_with_examples_is_run() {
    let mut files = vec![repo().join("README.md"), repo().join("python/README.md")];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    let mut unrun = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f
            .strip_prefix(repo())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let has = text
            .lines()
            .any(|l| matches!(l.trim(), "```sh" | "```bash" | "```python" | "```console"));
        let run = RUN_HERE.contains(&rel.as_str())
            || (rel == "python/README.md"
                && std::fs::read_to_string(repo().join("python/tests/test_readme.py"))
                    .is_ok_and(|t| t.contains("README.md")));
        if has && !run {
            unrun.push(rel);
        }
    }
    assert!(unrun.is_empty(), "examples no test runs: {unrun:?}");
}

#[test]
fn a_block_without_a_marker_is_refused() {
    let r = std::panic::catch_unwind(|| blocks("text\n```sh\nls\n```\n", "t.md"));
    assert!(r.is_err());
    let b = blocks(
        "<!-- example: excluded: slow -->\n```sh\nx\n```\n<!-- example: run -->\n```sh\ny\n```\n",
        "t.md",
    );
    assert_eq!(
        b,
        vec![(Mark::Excluded, "x\n".into()), (Mark::Run, "y\n".into())]
    );
}
