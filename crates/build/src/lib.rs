//! csx-build: the one C-to-eBPF path of csx. The build scripts that embed device programs
//! (csx-data, csx-fs, csx-bench, csx-workloads) use it as a build-dependency; csx-workloads'
//! run-time compiler (`csx build`) uses [`compile_bpf`] too, so every compile has the
//! same flags ([`BPF_FLAGS`]).
//!
//! * [`compile_bpf`]: one compile, `clang BPF_FLAGS FLAGS -I INCLUDE... -c SOURCE -o
//!   OBJECT`, its diagnostics captured in the error; a clang that cannot run is an error
//!   naming `scripts/setup.sh`.
//! * [`Clang`]: the build scripts' compiler (`$CSX_CLANG`, else `clang`), its version,
//!   and [`Clang::bpf`] (a [`compile_bpf`] whose error is the message cargo prints).
//! * [`c_sources`]: the `.c` files of a directory, sorted, each (and the directory, and its
//!   headers) registered with `cargo:rerun-if-changed` so builds stay incremental.
//! * [`object_table`]: the Rust source of a `(name, eBPF object)` table that embeds the
//!   objects with `include_bytes!`.
//! * [`embed_folder`]: the whole build script of a folder of device programs: each
//!   `.c` file compiled with the SDK header, and the table of their objects written;
//!   [`embed_folder_variants`] also compiles a file several times, once per
//!   [`Variant`] (a `-D` choosing a strategy), under the variants' names.
//! * [`error`]: reports a failure the cargo way (`cargo::error=`), which fails the build.

#![warn(clippy::too_many_lines)]

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to do when clang is missing.
pub const SETUP_HINT: &str = "run scripts/setup.sh (it installs clang), or set CSX_CLANG";

/// Reports `message` as a build error: cargo fails the build and prints it.
pub fn error(message: &str) {
    println!("cargo::error={message}");
}

/// `CARGO_MANIFEST_DIR`/`rel`: a path of the repository from a crate's build script
/// (`repo_path("../../sdk/include")`).
pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join(rel)
}

/// The build script's `OUT_DIR`.
pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
}

/// The one flag set of every C-to-eBPF compile in csx: the build scripts' (through
/// [`Clang::bpf`]), the run-time compiler's and `csx build`'s (through [`compile_bpf`]),
/// and the tests' (`csx_testkit::tools::compile_bpf`).
/// Version 3 of the ISA (32-bit jumps and ALU), and no common symbols (an uninitialised
/// global gets a section the loader places, not a COMMON symbol it cannot). A caller
/// adds warnings or include directories, never another target or optimisation level.
pub const BPF_FLAGS: &[&str] = &["-O2", "-target", "bpf", "-mcpu=v3", "-fno-common"];

/// The extra flags of the programs csx ships (`sdk/programs`, `sdk/ops`, `sdk/ssb`,
/// `sdk/bench`): they compile without a warning.
pub const SDK_PROGRAM_FLAGS: &[&str] = &["-Wall", "-Wextra", "-Werror"];

/// Why a C-to-eBPF compile failed.
#[derive(Debug)]
pub enum CompileError {
    /// The compiler did not start (not installed, or not executable).
    NotRunnable {
        clang: String,
        source_path: PathBuf,
        source: std::io::Error,
    },
    /// It ran and refused the source; `stderr` holds its diagnostics.
    Failed {
        clang: String,
        source_path: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::NotRunnable {
                clang,
                source_path,
                source,
            } => write!(
                f,
                "running {clang} on {}: {source}; {SETUP_HINT}",
                source_path.display()
            ),
            CompileError::Failed {
                clang,
                source_path,
                status,
                stderr,
            } => write!(
                f,
                "{clang} -target bpf failed on {} ({status}):\n{stderr}",
                source_path.display()
            ),
        }
    }
}

impl std::error::Error for CompileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CompileError::NotRunnable { source, .. } => Some(source),
            CompileError::Failed { .. } => None,
        }
    }
}

/// Compiles the C file `source` to the eBPF object `object`:
/// `CLANG BPF_FLAGS FLAGS -I INCLUDE... -c SOURCE -o OBJECT` (see [`BPF_FLAGS`]).
/// clang's diagnostics are captured: a failure carries them.
pub fn compile_bpf(
    clang: &Path,
    source: &Path,
    object: &Path,
    flags: &[&str],
    includes: &[&Path],
) -> Result<(), CompileError> {
    let mut cmd = Command::new(clang);
    cmd.args(BPF_FLAGS).args(flags);
    for dir in includes {
        cmd.arg("-I").arg(dir);
    }
    let output = cmd
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(object)
        .output()
        .map_err(|e| CompileError::NotRunnable {
            clang: clang.display().to_string(),
            source_path: source.to_path_buf(),
            source: e,
        })?;
    if !output.status.success() {
        return Err(CompileError::Failed {
            clang: clang.display().to_string(),
            source_path: source.to_path_buf(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(())
}

/// The C compiler of device programs, as a build script finds it.
#[derive(Clone, Debug)]
pub struct Clang {
    /// The command: `$CSX_CLANG`, else `clang`.
    pub path: String,
}

impl Clang {
    /// The compiler `CSX_CLANG` names (else `clang`); a change of the variable reruns the
    /// build script.
    pub fn from_env() -> Clang {
        println!("cargo:rerun-if-env-changed=CSX_CLANG");
        Clang {
            path: std::env::var("CSX_CLANG").unwrap_or_else(|_| "clang".to_string()),
        }
    }

    /// The first line of `clang --version`, or why clang cannot run (naming
    /// `scripts/setup.sh`).
    pub fn version(&self) -> Result<String, String> {
        let clang = &self.path;
        let out = Command::new(clang)
            .arg("--version")
            .output()
            .map_err(|e| format!("`{clang} --version` failed to start ({e}); {SETUP_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{clang} --version` exited with {}; {SETUP_HINT}",
                out.status
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.lines().next().unwrap_or("clang").trim().to_string())
    }

    /// Compiles `source` to the eBPF object `object` ([`compile_bpf`]); the error is
    /// the message to report, clang's diagnostics included.
    pub fn bpf(
        &self,
        source: &Path,
        object: &Path,
        flags: &[&str],
        includes: &[&Path],
    ) -> Result<(), String> {
        compile_bpf(Path::new(&self.path), source, object, flags, includes)
            .map_err(|e| e.to_string())
    }
}

/// `(stem, path)` of every `.c` file in `dir`, sorted by stem. Registers the directory and
/// every file in it (headers too) with `cargo:rerun-if-changed`.
pub fn c_sources(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut sources = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .path();
        println!("cargo:rerun-if-changed={}", path.display());
        if path.extension().is_some_and(|e| e == "c") {
            let stem = path
                .file_stem()
                .expect("a .c file has a stem")
                .to_string_lossy()
                .into_owned();
            sources.push((stem, path));
        }
    }
    sources.sort();
    Ok(sources)
}

/// The Rust source of `pub static NAME: &[(&str, &[u8])]`, one `(name, include_bytes!(object))`
/// per entry in order, under the comment `generated_by` and the doc comment `doc`.
pub fn object_table(
    generated_by: &str,
    doc: &str,
    name: &str,
    entries: &[(String, PathBuf)],
) -> String {
    let mut table =
        format!("// {generated_by}\n\n/// {doc}\npub static {name}: &[(&str, &[u8])] = &[\n");
    for (entry, object) in entries {
        writeln!(
            table,
            "    ({entry:?}, include_bytes!({:?})),",
            object.display().to_string()
        )
        .expect("infallible");
    }
    table.push_str("];\n");
    table
}

/// A folder of device programs to embed: every `.c` file of `sources` compiled with
/// [`BPF_FLAGS`] and `flags`, `sdk/include` and the folder itself on the include path,
/// into OUT_DIR.
#[derive(Clone, Copy, Debug)]
pub struct Folder<'a> {
    /// The folder, relative to the crate (`../../sdk/programs`).
    pub sources: &'a str,
    /// Flags after [`BPF_FLAGS`].
    pub flags: &'a [&'a str],
    /// The generated file in OUT_DIR (`sdk_programs.rs`).
    pub table_file: &'a str,
    /// Its first comment, naming the build script that made it.
    pub generated_by: &'a str,
    /// The doc comment of the table `pub static OBJECTS: &[(&str, &[u8])]`.
    pub doc: &'a str,
}

/// One program compiled from a source of a [`Folder`] with extra flags, under its own
/// name (`filter_bitmask` from `filter.c` with `-DSSB_STRATEGY=1`).
#[derive(Clone, Copy, Debug)]
pub struct Variant<'a> {
    /// The program's name in the table (and its object's stem).
    pub name: &'a str,
    /// The stem of the source file it is compiled from (`filter`).
    pub source: &'a str,
    /// Flags after the folder's.
    pub flags: &'a [&'a str],
}

/// Compiles every program of `folder` (`<stem>.bpf.o` in OUT_DIR) and writes the
/// `OBJECTS` table of them; a failure is reported to cargo ([`error`]), which fails
/// the build.
pub fn embed_folder(folder: &Folder<'_>) {
    embed_folder_variants(folder, &[]);
}

/// [`embed_folder`], except that a source some of `variants` name is compiled once per
/// variant (with its flags, under its name) instead of once under its stem. The table
/// lists the programs in the order of the sources, a source's variants in their order.
pub fn embed_folder_variants(folder: &Folder<'_>, variants: &[Variant<'_>]) {
    let out = out_dir();
    let source_dir = repo_path(folder.sources);
    let include_dir = repo_path("../../sdk/include");
    println!(
        "cargo:rerun-if-changed={}",
        include_dir.join("csx.h").display()
    );
    let clang = Clang::from_env();
    let sources = match c_sources(&source_dir) {
        Ok(s) => s,
        Err(e) => return error(&e),
    };
    if let Some(v) = variants
        .iter()
        .find(|v| !sources.iter().any(|(stem, _)| stem == v.source))
    {
        return error(&format!(
            "variant {} names {}.c, which is not in {}",
            v.name,
            v.source,
            source_dir.display()
        ));
    }
    let mut objects = Vec::new();
    for (stem, path) in &sources {
        for (name, extra) in programs_of(stem, variants) {
            let object = out.join(format!("{name}.bpf.o"));
            let flags: Vec<&str> = folder.flags.iter().chain(extra).copied().collect();
            if let Err(e) = clang.bpf(path, &object, &flags, &[&include_dir, &source_dir]) {
                return error(&e);
            }
            objects.push((name.to_string(), object));
        }
    }
    let table = object_table(folder.generated_by, folder.doc, "OBJECTS", &objects);
    fs::write(out.join(folder.table_file), table).expect("OUT_DIR is writable");
}

/// The `(name, extra flags)` of the programs compiled from the source `stem`: its
/// variants, or the stem itself with none.
fn programs_of<'a>(stem: &'a str, variants: &[Variant<'a>]) -> Vec<(&'a str, &'a [&'a str])> {
    let named: Vec<_> = variants
        .iter()
        .filter(|v| v.source == stem)
        .map(|v| (v.name, v.flags))
        .collect();
    if named.is_empty() {
        vec![(stem, &[][..])]
    } else {
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_the_c_files_sorted() {
        let dir = std::env::temp_dir().join(format!("csx-build-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for f in ["b.c", "a.c", "a.h", "notes.txt"] {
            fs::write(dir.join(f), "").unwrap();
        }
        let got = c_sources(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(c_sources(Path::new("/no/such/dir"))
            .unwrap_err()
            .contains("/no/such/dir"));
    }

    #[test]
    fn a_missing_clang_names_the_setup_script() {
        let clang = Clang {
            path: "/no/such/clang".into(),
        };
        let e = clang.version().unwrap_err();
        assert!(e.contains("scripts/setup.sh"), "{e}");
        let e = clang
            .bpf(Path::new("x.c"), Path::new("x.o"), &[], &[])
            .unwrap_err();
        assert!(e.contains("scripts/setup.sh") && e.contains("x.c"), "{e}");
    }

    /// A source clang refuses: the error names the file and carries clang's own
    /// diagnostic (the word it could not resolve). Needs clang, as every build does.
    #[test]
    fn a_refused_source_carries_the_diagnostics() {
        let dir = std::env::temp_dir().join(format!("csx-build-refused-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let source = dir.join("broken.c");
        fs::write(&source, "int f(void) { return no_such_name; }\n").unwrap();
        let clang = std::env::var("CSX_CLANG").unwrap_or_else(|_| "clang".to_string());
        let e =
            compile_bpf(Path::new(&clang), &source, &dir.join("broken.o"), &[], &[]).unwrap_err();
        fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, CompileError::Failed { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("broken.c") && text.contains("no_such_name"),
            "{text}"
        );
    }

    #[test]
    fn a_source_with_variants_is_compiled_once_per_variant() {
        let variants = [
            Variant {
                name: "f_one",
                source: "f",
                flags: &["-DN=1"],
            },
            Variant {
                name: "f_two",
                source: "f",
                flags: &["-DN=2"],
            },
        ];
        assert_eq!(
            programs_of("f", &variants),
            [("f_one", &["-DN=1"][..]), ("f_two", &["-DN=2"][..])]
        );
        assert_eq!(programs_of("g", &variants), [("g", &[][..])]);
    }

    #[test]
    fn the_table_embeds_each_object_in_order() {
        let t = object_table(
            "Generated.",
            "Objects.",
            "OBJECTS",
            &[
                ("b".into(), PathBuf::from("/o/b.o")),
                ("a".into(), PathBuf::from("/o/a.o")),
            ],
        );
        assert!(
            t.contains("pub static OBJECTS: &[(&str, &[u8])] = &["),
            "{t}"
        );
        let (b, a) = (
            t.find("(\"b\", include_bytes!(\"/o/b.o\"))"),
            t.find("(\"a\","),
        );
        assert!(b.is_some() && a.is_some() && b < a, "{t}");
    }
}
