//! Integration tests of the `csx` binary: they run the built executable as a user (or
//! the bpf_conformance runner) would.

mod array;
mod conformance_plugin;
mod crash;
mod device_exec;
mod doc_examples;
mod durability_cli;
mod engine_flag;
mod lambda;
mod mount_cli;
mod old_spellings;
mod pipe_cli;
mod programs_cli;
mod served_exec;
mod shell_pipes;
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

/// The shared directory (`csx_testkit::tools::shared_dir`), which must hold the
/// bpf_conformance suite: a missing suite fails the tests, never passes them silently.
pub fn shared_dir() -> PathBuf {
    csx_testkit::tools::shared_dir()
}
