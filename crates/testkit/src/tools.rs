//! What the tests need from the machine, found in one place: clang (for C test programs)
//! and the shared directory beside the repository (the bpf_conformance suite).
//!
//! Invariant: a missing tool fails the test that needs it, naming `scripts/setup.sh` (or
//! the variable to set); nothing is skipped.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// What a failure message tells the reader to do.
pub const SETUP_HINT: &str = "run scripts/setup.sh (it installs clang and clang-19)";

/// Environment variable naming the clang to use instead of `clang`.
pub const CLANG_ENV: &str = "CSX_CLANG";

/// Environment variable naming the clang 19 to use instead of `clang-19`.
pub const CLANG_19_ENV: &str = "CSX_CLANG19";

/// Environment variable naming the shared directory (holding `conformance/`).
pub const SHARED_DIR_ENV: &str = "CSX_SHARED_DIR";

/// `$CSX_CLANG`, else `clang`: checked to run once per process. Panics naming
/// `scripts/setup.sh` when it does not.
pub fn clang() -> &'static Path {
    static CLANG: OnceLock<PathBuf> = OnceLock::new();
    CLANG.get_or_init(|| find_compiler(CLANG_ENV, "clang"))
}

/// `$CSX_CLANG19`, else `clang-19`: the compiler of the loader's cpu v1/v3/v4 variants
/// (the only Debian clang that emits cpu v4). Panics naming `scripts/setup.sh` when it
/// does not run.
pub fn clang_19() -> &'static Path {
    static CLANG_19: OnceLock<PathBuf> = OnceLock::new();
    CLANG_19.get_or_init(|| find_compiler(CLANG_19_ENV, "clang-19"))
}

fn find_compiler(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from);
    match Command::new(&path).arg("--version").output() {
        Ok(out) if out.status.success() => path,
        Ok(out) => panic!(
            "`{} --version` failed ({}): {SETUP_HINT}, or set {env}",
            path.display(),
            out.status
        ),
        Err(e) => panic!(
            "cannot run `{}` ({e}): {SETUP_HINT}, or set {env}",
            path.display()
        ),
    }
}

/// Compiles the C file `source` for BPF: `COMPILER BPF_FLAGS -c FLAGS SOURCE`, with
/// csx-build's one flag set ([`csx_build::BPF_FLAGS`]); a later `-mcpu` in `flags` wins
/// (the loader's tests compile at v1 and v4 on purpose).
/// Returns the object's bytes; panics with the compiler's messages when it fails.
pub fn compile_bpf<I>(compiler: &Path, source: &Path, flags: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let mut cmd = Command::new(compiler);
    cmd.args(csx_build::BPF_FLAGS)
        .arg("-c")
        .args(flags)
        .arg(source)
        .args(["-o", "-"]);
    run_compiler(cmd, &source.display().to_string(), None)
}

/// Compiles C source text for BPF, as [`compile_bpf`] does a file.
pub fn compile_bpf_source<I>(compiler: &Path, source: &str, flags: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let mut cmd = Command::new(compiler);
    cmd.args(csx_build::BPF_FLAGS)
        .arg("-c")
        .args(flags)
        .args(["-x", "c", "-", "-o", "-"]);
    run_compiler(cmd, "<source text>", Some(source))
}

fn run_compiler(mut cmd: Command, what: &str, stdin: Option<&str>) -> Vec<u8> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown} ({e}): {SETUP_HINT}"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("writing {what} to the compiler: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed on {what} ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        stdin
            .map(|s| format!("\n--- source ---\n{s}"))
            .unwrap_or_default()
    );
    assert!(!out.stdout.is_empty(), "{shown} wrote no object for {what}");
    out.stdout
}

/// The shared directory: `$CSX_SHARED_DIR`, else the first `shared` directory holding
/// `conformance/vectors.json` beside the workspace or one of its ancestors (so a git
/// worktree under `/work/wt/NAME` finds `/work/shared` as `/work/main` does). Panics,
/// naming the variable, when there is none.
pub fn shared_dir() -> PathBuf {
    let marker = Path::new("conformance/vectors.json");
    if let Some(dir) = std::env::var_os(SHARED_DIR_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join(marker).is_file(),
            "{SHARED_DIR_ENV}={} holds no {}",
            dir.display(),
            marker.display()
        );
        return dir;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    for ancestor in workspace.ancestors().skip(1) {
        let dir = ancestor.join("shared");
        if dir.join(marker).is_file() {
            return dir;
        }
    }
    panic!(
        "the shared directory (with the bpf_conformance suite, {}) is not beside {} or \
         any directory above it: set {SHARED_DIR_ENV} to it",
        marker.display(),
        workspace.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_c_text_to_a_bpf_object() {
        let object = compile_bpf_source(clang(), "int f(void) { return 7; }\n", ["-g0"]);
        assert_eq!(&object[..4], b"\x7fELF");
        // e_machine 247 is EM_BPF.
        assert_eq!(u16::from_le_bytes([object[18], object[19]]), 247);
    }

    #[test]
    #[should_panic(expected = "failed on <source text>")]
    fn a_compile_error_fails_loudly() {
        compile_bpf_source(clang(), "this is not C", std::iter::empty::<&str>());
    }

    #[test]
    fn finds_the_shared_directory() {
        assert!(shared_dir().join("conformance/vectors.json").is_file());
    }
}
