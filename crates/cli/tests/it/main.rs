//! Integration tests of the `csx` binary: they run the built executable as a user (or
//! the bpf_conformance runner) would.

mod conformance_plugin;
mod device_exec;
mod lambda;
mod mount_cli;
mod served_exec;
mod vm_run;
mod workloads_cli;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The `csx` binary cargo built for these tests.
pub fn csx() -> Command {
    Command::new(env!("CARGO_BIN_EXE_csx"))
}

/// Runs `cmd` with `stdin` as its standard input and collects its output.
pub fn run_with_stdin(mut cmd: Command, stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("csx starts");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    pipe.write_all(stdin).expect("csx reads its stdin");
    drop(pipe);
    child.wait_with_output().expect("csx finishes")
}

/// `../shared` beside the repository, or `$CSX_SHARED_DIR`. Panics if it is absent:
/// a missing suite must fail the tests, never pass them silently.
pub fn shared_dir() -> PathBuf {
    let dir = match std::env::var_os("CSX_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    assert!(
        dir.join("conformance/vectors.json").is_file(),
        "the bpf_conformance suite is missing: no conformance/vectors.json under {} \
         (set CSX_SHARED_DIR to the shared directory)",
        dir.display()
    );
    dir
}
