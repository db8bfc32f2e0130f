//! `csx bench vm --kernels FILE.c`: a user's own C file as benchmark kernels.
//!
//! The file is compiled twice with clang into a temporary directory, as the built-in
//! kernels are: to eBPF (csx-build's one path and flags, [`csx_build::compile_bpf`]) and
//! natively (`-O2 -fPIC -shared`, loaded with `dlopen`, `native.rs`). Every global function of the eBPF object is a kernel; each must
//! have the form `u64 NAME(void *mem, u64 len)` and gets 64 KiB of seeded random bytes.
//! As for the built-in kernels, the interpreter runs each first on the read-only input
//! and must not trap before the native build is called on the same bytes.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};

use super::native::{user_function, Library};
use super::{CompiledKernel, Input, Native, Rng, Scale};

/// Bytes of a user kernel's input (and for tests).
const INPUT_BYTES: usize = 64 << 10;
const INPUT_BYTES_TEST: usize = 2 << 10;

/// The input of user kernel `name`: random bytes from a seed that mixes in the name.
pub(crate) fn input(name: &str, scale: Scale) -> Input {
    let len = if scale == Scale::Full {
        INPUT_BYTES
    } else {
        INPUT_BYTES_TEST
    };
    let mut rng = Rng::for_kernel(name);
    let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    Input::raw(&data)
}

/// Compiles `file` both ways and returns one kernel per global function. The kernels
/// and the loaded native library live until the process exits.
pub(crate) fn compile(file: &Path) -> anyhow::Result<&'static [CompiledKernel]> {
    let clang = std::env::var("CSX_CLANG").unwrap_or_else(|_| "clang".to_string());
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let object = dir.path().join("kernels.bpf.o");
    let library = dir.path().join("kernels.so");
    csx_build::compile_bpf(Path::new(&clang), file, &object, &[], &[])?;
    run_clang(&clang, file, &["-O2", "-fPIC", "-shared"], &library)?;

    let bpf_object: &'static [u8] = Box::leak(
        std::fs::read(&object)
            .with_context(|| format!("reading {}", object.display()))?
            .into_boxed_slice(),
    );
    let functions = csx_ebpf::loader::list_programs(bpf_object)
        .with_context(|| format!("reading the eBPF object of {}", file.display()))?;
    if functions.is_empty() {
        bail!(
            "{} defines no global function; write kernels as `u64 NAME(void *mem, u64 len)`",
            file.display()
        );
    }
    let handle = Library::open(&library)?;
    let mut kernels = Vec::with_capacity(functions.len());
    for f in functions {
        let native = user_function(handle, &f.name)
            .with_context(|| format!("function {} in the native build", f.name))?;
        let name: &'static str = Box::leak(f.name.into_boxed_str());
        kernels.push(CompiledKernel {
            name,
            symbol: name,
            bpf_object,
            native: Native::MemLen(native),
        });
    }
    Ok(Box::leak(kernels.into_boxed_slice()))
}

/// Runs `clang FLAGS file -o out` (the native build), failing loudly with what to
/// install.
fn run_clang(clang: &str, file: &Path, flags: &[&str], out: &Path) -> anyhow::Result<()> {
    let output = Command::new(clang)
        .args(flags)
        .arg(file)
        .arg("-o")
        .arg(out)
        .output()
        .with_context(|| {
            format!("running {clang}; run scripts/setup.sh (it installs clang) or set CSX_CLANG")
        })?;
    if !output.status.success() {
        bail!(
            "{clang} {} {} failed ({}):\n{}",
            flags.join(" "),
            file.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::prepare;
    use super::*;

    fn write_source(dir: &Path, text: &str) -> std::path::PathBuf {
        let path = dir.join("mine.c");
        std::fs::write(&path, text).expect("temporary directory is writable");
        path
    }

    /// A user's file with two kernels: each is found, built both ways, and agrees with
    /// the same computation done here.
    #[test]
    fn a_users_functions_are_kernels() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = write_source(
            dir.path(),
            "typedef unsigned long long u64;\n\
             u64 sum(void *mem, u64 len) { unsigned char *p = mem; u64 s = 0;\n\
               for (u64 i = 0; i < len; i++) s += p[i]; return s; }\n\
             u64 odd(void *mem, u64 len) { unsigned char *p = mem; u64 n = 0;\n\
               for (u64 i = 0; i < len; i++) n += p[i] & 1; return n; }\n",
        );
        let kernels = compile(&file).expect("compiles");
        let mut names: Vec<_> = kernels.iter().map(|k| k.name).collect();
        names.sort_unstable();
        assert_eq!(names, ["odd", "sum"]);
        for k in kernels {
            let p = prepare(k, Scale::Test).expect("interpreter agrees with native");
            let bytes = input(k.name, Scale::Test).bytes().to_vec();
            assert_eq!(bytes.len(), INPUT_BYTES_TEST);
            let want: u64 = match k.name {
                "sum" => bytes.iter().map(|&b| u64::from(b)).sum(),
                _ => bytes.iter().map(|&b| u64::from(b & 1)).sum(),
            };
            assert_eq!(p.answer, want, "kernel {}", k.name);
        }
    }

    /// A kernel that writes its input, or reads past it, stops on the interpreter with
    /// the trap named, before its native build runs.
    #[test]
    fn a_kernel_that_leaves_its_input_is_an_error() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = write_source(
            dir.path(),
            "typedef unsigned long long u64;\n\
             u64 scribble(void *mem, u64 len) { ((unsigned char *)mem)[0] = 1; return len; }\n\
             u64 overrun(void *mem, u64 len) { return ((unsigned char *)mem)[len]; }\n",
        );
        for k in compile(&file).expect("compiles") {
            let err = format!("{:#}", prepare(k, Scale::Test).err().expect("traps"));
            assert!(err.contains("trap at pc"), "{}: {err}", k.name);
        }
    }

    #[test]
    fn compile_errors_are_reported() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = write_source(dir.path(), "this is not C\n");
        let err = format!("{:#}", compile(&file).err().expect("fails"));
        assert!(err.contains("failed"), "{err}");
        let file = write_source(dir.path(), "static int x;\n");
        let err = format!("{:#}", compile(&file).err().expect("fails"));
        assert!(err.contains("no global function"), "{err}");
    }
}
