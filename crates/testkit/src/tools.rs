//! What the tests need from the machine, found in one place: clang (for C test programs)
//! and the shared directory beside the repository (the bpf_conformance suite).
//!
//! Invariant: a missing tool fails the test that needs it, naming `scripts/setup.sh` (or
//! the variable to set); nothing is skipped.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// `sdk/include`: the SDK header's directory, on the include path of the programs csx ships.
pub fn sdk_include() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/include")
}

/// Compiles the C file `source` as `csx build` compiles a device program: [`clang`],
/// csx-build's one path and flags ([`csx_build::compile_bpf`]) and [`sdk_include`].
/// Returns the object's bytes; panics with clang's messages when it fails.
pub fn compile_program(source: &Path) -> Vec<u8> {
    let include = sdk_include();
    compile(clang(), source, &[], &[&include], None)
}

/// [`compile_program`] of C source text.
pub fn compile_program_source(source: &str) -> Vec<u8> {
    let include = sdk_include();
    compile_text(clang(), source, &[], &[&include])
}

/// Compiles the C file `source` for BPF through csx-build's one path
/// ([`csx_build::compile_bpf`]: `COMPILER BPF_FLAGS FLAGS -c SOURCE`) with the extra
/// `flags` a test varies (a later `-mcpu` wins: the loader's tests compile at v1 and v4
/// on purpose) or needs (`-I DIR`, a warning switch).
/// Returns the object's bytes; panics with the compiler's messages when it fails.
pub fn compile_bpf<I>(compiler: &Path, source: &Path, flags: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let flags = strings(flags);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile(compiler, source, &flags, &[], None)
}

/// Compiles C source text for BPF, as [`compile_bpf`] does a file.
pub fn compile_bpf_source<I>(compiler: &Path, source: &str, flags: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let flags = strings(flags);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile_text(compiler, source, &flags, &[])
}

fn strings<I>(flags: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    flags
        .into_iter()
        .map(|f| {
            let f = f.as_ref();
            f.to_str()
                .unwrap_or_else(|| panic!("compiler flag {f:?} is not UTF-8"))
                .to_string()
        })
        .collect()
}

/// A fresh path in the temporary directory, unique in this process and among processes.
fn scratch(extension: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "csx-testkit-{}-{n}.{extension}",
        std::process::id()
    ))
}

/// Writes `text` to a scratch `.c` file and compiles it; the panic message shows the text.
fn compile_text(compiler: &Path, text: &str, flags: &[&str], includes: &[&Path]) -> Vec<u8> {
    let source = scratch("c");
    std::fs::write(&source, text).unwrap_or_else(|e| panic!("writing {}: {e}", source.display()));
    let object =
        std::panic::catch_unwind(|| compile(compiler, &source, flags, includes, Some(text)));
    let _ = std::fs::remove_file(&source);
    object.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// One compile through [`csx_build::compile_bpf`] into a scratch object, read back.
/// `text` is the source when it came as text (shown on failure instead of its path).
fn compile(
    compiler: &Path,
    source: &Path,
    flags: &[&str],
    includes: &[&Path],
    text: Option<&str>,
) -> Vec<u8> {
    let what = match text {
        Some(_) => "<source text>".to_string(),
        None => source.display().to_string(),
    };
    let object = scratch("o");
    let result = csx_build::compile_bpf(compiler, source, &object, flags, includes);
    let bytes = result.map(|()| std::fs::read(&object));
    let _ = std::fs::remove_file(&object);
    let shown = text
        .map(|s| format!("\n--- source ---\n{s}"))
        .unwrap_or_default();
    let bytes = match bytes {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => panic!("reading the object of {what}: {e}"),
        Err(e) => panic!("{} failed on {what}: {e}{shown}", compiler.display()),
    };
    assert!(
        !bytes.is_empty(),
        "{} wrote no object for {what}",
        compiler.display()
    );
    bytes
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
    fn compiles_a_program_with_the_sdk_header() {
        let object =
            compile_program_source("#include \"csx.h\"\nCSX_PROGRAM(p) { return win0_len; }\n");
        assert_eq!(&object[..4], b"\x7fELF");
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
