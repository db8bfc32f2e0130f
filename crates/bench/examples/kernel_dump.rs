//! Writes every `csx bench vm` kernel as a file set a tool without the bench can read:
//! `kernel_dump DIR [FILE.c ...]`. For each built-in kernel (set `sdk/bench`) and each
//! function of each FILE.c (compiled by csx-build's one path, as `csx bench vm
//! --kernels` compiles it), DIR gets `N.o` (the eBPF object) and `N.in` (the full-size
//! input `csx_bench::kernels::input` gives it: a file's functions get the generic random
//! bytes), and `DIR/index.tsv` a line `set<TAB>kernel<TAB>symbol<TAB>N`. csx-ebpf's
//! `fuse_profile` example reads it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use csx_bench::kernels;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, files) = args
        .split_first()
        .context("usage: kernel_dump DIR [FILE.c ...]")?;
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    let mut index = String::new();
    let mut n = 0;
    let mut write = |set: &str, name: &str, symbol: &str, object: &[u8]| -> anyhow::Result<()> {
        std::fs::write(dir.join(format!("{n}.o")), object)?;
        std::fs::write(dir.join(format!("{n}.in")), kernels::input(name))?;
        writeln!(index, "{set}\t{name}\t{symbol}\t{n}")?;
        n += 1;
        Ok(())
    };
    for k in kernels::all() {
        write("sdk/bench", k.name, k.symbol, k.bpf_object)?;
    }
    let clang = std::env::var("CSX_CLANG").unwrap_or_else(|_| "clang".to_string());
    let tmp = tempfile::tempdir()?;
    for file in files {
        let object = tmp.path().join("kernels.bpf.o");
        csx_build::compile_bpf(Path::new(&clang), Path::new(file), &object, &[], &[])?;
        let bytes = std::fs::read(&object)?;
        let set = Path::new(file)
            .file_stem()
            .map_or(file.clone(), |s| s.to_string_lossy().into_owned());
        for f in csx_ebpf::loader::list_programs(&bytes)? {
            write(&set, &f.name, &f.name, &bytes)?;
        }
    }
    std::fs::write(dir.join("index.tsv"), index)?;
    Ok(())
}
