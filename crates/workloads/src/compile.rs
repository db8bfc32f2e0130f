//! Building device programs: C to an eBPF object with clang, cached, and checked against
//! a device's function table before it ships (`csx build`).
//!
//! [`Compiler`] compiles through csx-build's one C-to-eBPF path
//! ([`csx_build::compile_bpf`], flags [`csx_build::BPF_FLAGS`]) with the SDK header on
//! the include path. The header it uses is generated from the built-in function table
//! ([`crate::sdk::builtin_header`]) and written into the cache directory, so programs
//! build the same from a repository checkout or from an installed `csx` binary (the
//! committed `sdk/include/csx.h` is kept byte-identical by a test).
//!
//! The SDK's own programs are compiled when the crate is built (`build.rs`, the same
//! flags) and embedded: [`program`] returns one without a compiler. Their sources
//! ([`PROGRAMS`]) are embedded too, for variants compiled at run time.
//!
//! Source text ([`Compiler::compile_source`]) is compiled into
//! `<cache>/programs/<name>-<key>.o`, where the key hashes clang's version, the flags,
//! the source and the header; a stale object is never reused, and a cached one is
//! shared by every process. Writes go to a temporary name and are renamed into place,
//! so concurrent builders never see half an object.
//!
//! [`check_object`] is the step `csx build` runs after compiling: every `extern`
//! function the object calls must be in the device's table (the missing ones are
//! named), and the object must load and verify as the device would load it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use csx_build::{CompileError, BPF_FLAGS, SDK_PROGRAM_FLAGS};

use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable};
use csx_ebpf::loader::{self, LoadError};
use csx_ebpf::verifier::{self, VerifyError};
use csx_proto::{FunctionInfo, WireArgKind};

/// The objects `build.rs` compiled from `sdk/programs`.
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/sdk_programs.rs"));
}

/// The object of the SDK program `name` (one of [`PROGRAMS`]), compiled when the crate
/// was built: no compiler is needed to run it.
pub fn program(name: &str) -> Result<&'static [u8], BuildError> {
    embedded::OBJECTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, object)| *object)
        .ok_or_else(|| BuildError::UnknownProgram {
            name: name.to_string(),
        })
}

/// One embedded source file of the SDK's programs.
#[derive(Clone, Copy, Debug)]
pub struct ProgramSource {
    /// The file stem in `sdk/programs/` and the name of its entry function.
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! program_sources {
    ($($name:literal),* $(,)?) => {
        &[$(ProgramSource {
            name: $name,
            source: include_str!(concat!("../../../sdk/programs/", $name, ".c")),
        }),*]
    };
}

/// Every program in `sdk/programs/`.
pub const PROGRAMS: &[ProgramSource] = program_sources![
    "stats64",
    "stats32",
    "knn",
    "grep",
    "bitmap",
    "filter",
    "aggregate",
    "filter_aggregate",
    "file_read",
    "select_poslist",
    "select_bitmask",
    "select_accel",
];

/// Why a program could not be built or would not load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error(
        "clang not found (`{clang}`): run scripts/setup.sh, \
         or set CSX_CLANG to a clang with the BPF target"
    )]
    ClangMissing { clang: String },
    #[error("running `{clang}`: {source}")]
    ClangSpawn {
        clang: String,
        source: std::io::Error,
    },
    #[error("clang failed on {}:\n{stderr}", source_path.display())]
    Compile {
        source_path: PathBuf,
        stderr: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no SDK program `{name}`; programs: {}", program_names())]
    UnknownProgram { name: String },
    #[error("the object calls functions the device does not offer: {}", missing.join(", "))]
    MissingFunctions { missing: Vec<String> },
    #[error("the object does not load: {source}")]
    Load {
        #[from]
        source: LoadError,
    },
    #[error("the program does not verify: {source}")]
    Verify {
        #[from]
        source: VerifyError,
    },
    #[error("the device's function table is inconsistent: {reason}")]
    FunctionTable { reason: String },
}

/// The SDK programs' names, for messages.
fn program_names() -> String {
    let names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
    names.join(", ")
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The default cache directory: `$CSX_CACHE_DIR`, else `$XDG_CACHE_HOME/csx`, else
/// `$HOME/.cache/csx`, else `csx-cache` in the temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CSX_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("csx");
    }
    if let Some(d) = std::env::var_os("HOME") {
        return PathBuf::from(d).join(".cache").join("csx");
    }
    std::env::temp_dir().join("csx-cache")
}

/// A clang able to target BPF, and where its outputs are cached.
#[derive(Clone, Debug)]
pub struct Compiler {
    clang: PathBuf,
    clang_version: String,
    cache_dir: PathBuf,
}

impl Compiler {
    /// `$CSX_CLANG` or `clang`, caching in [`default_cache_dir`].
    pub fn new() -> Result<Compiler, BuildError> {
        let clang =
            std::env::var_os("CSX_CLANG").map_or_else(|| PathBuf::from("clang"), PathBuf::from);
        Compiler::with_clang(clang, default_cache_dir())
    }

    /// A given clang and cache directory. Fails when clang does not run.
    pub fn with_clang(clang: PathBuf, cache_dir: PathBuf) -> Result<Compiler, BuildError> {
        let shown = clang.display().to_string();
        let output = match Command::new(&clang).arg("--version").output() {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BuildError::ClangMissing { clang: shown });
            }
            Err(source) => {
                return Err(BuildError::ClangSpawn {
                    clang: shown,
                    source,
                })
            }
        };
        if !output.status.success() {
            return Err(BuildError::ClangMissing { clang: shown });
        }
        let clang_version = String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        Ok(Compiler {
            clang,
            clang_version,
            cache_dir,
        })
    }

    /// The same clang, caching in `dir`.
    pub fn cache_in(mut self, dir: PathBuf) -> Compiler {
        self.cache_dir = dir;
        self
    }

    /// clang's first `--version` line.
    pub fn clang_version(&self) -> &str {
        &self.clang_version
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The directory holding the generated `csx.h`, written (or refreshed) now.
    pub fn include_dir(&self) -> Result<PathBuf, BuildError> {
        let dir = self.cache_dir.join("include");
        write_if_changed(&dir.join("csx.h"), crate::sdk::builtin_header().as_bytes())?;
        Ok(dir)
    }

    /// Compiles the C file `source_path` into `object_path` (`csx build`), with
    /// `extra_flags` after the standard ones. clang's diagnostics name the user's file.
    pub fn compile_file(
        &self,
        source_path: &Path,
        object_path: &Path,
        extra_flags: &[&str],
    ) -> Result<(), BuildError> {
        let include = self.include_dir()?;
        csx_build::compile_bpf(
            &self.clang,
            source_path,
            object_path,
            extra_flags,
            &[&include],
        )
        .map_err(|e| match e {
            CompileError::NotRunnable { clang, source, .. } => {
                BuildError::ClangSpawn { clang, source }
            }
            CompileError::Failed {
                source_path,
                stderr,
                ..
            } => BuildError::Compile {
                source_path,
                stderr,
            },
        })
    }

    /// The object of C source text `source` (named `name` in diagnostics), from the
    /// cache when an identical build exists.
    pub fn compile_source(
        &self,
        name: &str,
        source: &str,
        extra_flags: &[&str],
    ) -> Result<Vec<u8>, BuildError> {
        let header = crate::sdk::builtin_header();
        let mut key = Fnv64::new();
        key.write(self.clang_version.as_bytes());
        for flag in BPF_FLAGS.iter().chain(extra_flags) {
            key.write(flag.as_bytes());
            key.write(&[0]);
        }
        key.write(header.as_bytes());
        key.write(source.as_bytes());
        let dir = self.cache_dir.join("programs");
        let object_path = dir.join(format!("{name}-{:016x}.o", key.finish()));
        if let Ok(bytes) = std::fs::read(&object_path) {
            return Ok(bytes);
        }
        let source_path = dir.join(format!("{name}-{:016x}.c", key.finish()));
        write_if_changed(&source_path, source.as_bytes())?;
        let tmp = temporary_sibling(&object_path);
        self.compile_file(&source_path, &tmp, extra_flags)?;
        std::fs::rename(&tmp, &object_path).map_err(io_error(&object_path))?;
        std::fs::read(&object_path).map_err(io_error(&object_path))
    }

    /// The object of the SDK program `name` compiled now (as `build.rs` compiled the
    /// embedded one), from the cache when an identical build exists.
    pub fn compile_program(&self, name: &str) -> Result<Vec<u8>, BuildError> {
        let p =
            PROGRAMS
                .iter()
                .find(|p| p.name == name)
                .ok_or_else(|| BuildError::UnknownProgram {
                    name: name.to_string(),
                })?;
        self.compile_source(p.name, p.source, SDK_PROGRAM_FLAGS)
    }
}

/// `path.tmp.<pid>.<n>`: a name no other writer uses.
fn temporary_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{n}", std::process::id()));
    path.with_file_name(name)
}

/// Writes `bytes` to `path` (through a temporary and a rename) unless it holds them.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let dir = path.parent().expect("cache paths have a directory");
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let tmp = temporary_sibling(path);
    std::fs::write(&tmp, bytes).map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error(path))
}

/// FNV-1a, 64 bits: a stable hash for cache keys (std's hashers may change).
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The VM's function table for a device's published functions.
pub fn function_table(functions: &[FunctionInfo]) -> Result<FunctionTable, BuildError> {
    let mut table = FunctionTable::new();
    for f in functions {
        let args = f
            .args
            .iter()
            .map(|a| match *a {
                WireArgKind::Scalar => ArgKind::Scalar,
                WireArgKind::PtrIn { len_arg } => ArgKind::PtrIn { len_arg },
                WireArgKind::PtrOut { len_arg } => ArgKind::PtrOut { len_arg },
            })
            .collect();
        table
            .insert(FunctionSig {
                name: f.name.clone(),
                id: f.id.0,
                args,
                version: f.version,
                doc: f.doc.clone(),
            })
            .map_err(|e| BuildError::FunctionTable {
                reason: e.to_string(),
            })?;
    }
    Ok(table)
}

/// What [`check_object`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReport {
    /// The entry function the device will run.
    pub entry: String,
    /// Instruction slots after loading.
    pub slot_count: usize,
    /// The device functions the object calls, sorted.
    pub functions_used: Vec<String>,
}

/// Checks that `object` would load and verify on a device offering `functions`, with
/// `entry` chosen as the device would choose it. Missing functions are all named.
pub fn check_object(
    object: &[u8],
    entry: Option<&str>,
    functions: &[FunctionInfo],
) -> Result<ObjectReport, BuildError> {
    let used = loader::undefined_functions(object)?;
    let missing: Vec<String> = used
        .iter()
        .filter(|name| !functions.iter().any(|f| &f.name == *name))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(BuildError::MissingFunctions { missing });
    }
    let table = Arc::new(function_table(functions)?);
    let program = loader::load_elf(object, entry, &table)?;
    let entry = program.name.clone();
    let slot_count = program.insns.len();
    verifier::verify(program, table)?;
    Ok(ObjectReport {
        entry,
        slot_count,
        functions_used: used,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_pinned() {
        let mut h = Fnv64::new();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn every_program_is_embedded_once() {
        let mut names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PROGRAMS.len());
        // The objects build.rs compiled are the sources listed, one each.
        let mut built: Vec<&str> = embedded::OBJECTS.iter().map(|(n, _)| *n).collect();
        built.sort_unstable();
        assert_eq!(built, names);
        for p in PROGRAMS {
            assert!(
                p.source.contains(&format!("CSX_PROGRAM({})", p.name)),
                "{} declares its entry by its file name",
                p.name
            );
        }
    }

    #[test]
    fn the_builtin_table_converts() {
        let infos = csx_device::functions::function_infos();
        assert_eq!(function_table(&infos).unwrap().len(), infos.len());
    }
}
