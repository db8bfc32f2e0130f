//! The C API from C: compiles `tests/c/api_test.c` with gcc against libcsx (this crate's
//! cdylib, installed as `libcsx.so` in a temp dir) and runs it against an embedded device
//! and a daemon over tcp and shm. The C program asserts each result and status itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;

const N: u64 = 1000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a tool, failing loudly (naming scripts/setup.sh) when it is missing.
fn run_tool(cmd: &mut Command) -> std::process::Output {
    let name = format!("{:?}", cmd.get_program());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}; scripts/setup.sh installs it"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The directory holding this build's libcsx_capi.so: `target/<profile>/deps`, where
/// `cargo test` builds the crate's cdylib next to the test executables (only
/// `cargo build` copies it up to `target/<profile>`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("target/<profile>/deps");
    assert!(
        dir.join("libcsx_capi.so").exists(),
        "{} has no libcsx_capi.so: cargo builds it with the crate",
        dir.display()
    );
    dir.to_path_buf()
}

/// Builds the C program `tests/c/NAME.c` against libcsx (installed as `work/lib/libcsx.so`)
/// into `work/NAME`.
fn c_client(work: &Path, name: &str) -> PathBuf {
    let lib = work.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::copy(lib_dir().join("libcsx_capi.so"), lib.join("libcsx.so")).unwrap();
    let exe = work.join(name);
    run_tool(
        Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(repo().join("sdk/include"))
            .arg(repo().join(format!("crates/capi/tests/c/{name}.c")))
            .arg("-L")
            .arg(&lib)
            .arg("-lcsx")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe),
    );
    exe
}

/// Builds the C test and the filter program into `work`: (api_test, filter.o).
fn build(work: &Path) -> (PathBuf, PathBuf) {
    let exe = c_client(work, "api_test");
    let elf = work.join("filter.o");
    compile_bpf(&repo().join("sdk/programs/filter.c"), &elf);
    (exe, elf)
}

/// A state directory holding `/data/nums` = the u64s 0..N.
fn device_dir(work: &Path) -> PathBuf {
    let dir = work.join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 16 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir, config).expect("init the device");
    let nums: Vec<u8> = (0..N).flat_map(u64::to_le_bytes).collect();
    dev.put_bytes("/data/nums", &nums).unwrap();
    dev.close().unwrap();
    dir
}

fn run_api_test(exe: &Path, elf: &Path, uri: &str, mounted: Option<&Path>) {
    let out = run_tool(
        Command::new(exe)
            .arg(uri)
            .arg(elf)
            .args(mounted)
            .env("CSX_DEVICES", uri),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("api_test: ok"), "{uri}: {stdout}");
}

#[test]
fn c_programs_drive_an_embedded_device() {
    let work = tempfile::tempdir().unwrap();
    let (exe, elf) = build(work.path());
    let dir = device_dir(work.path());
    run_api_test(&exe, &elf, dir.to_str().unwrap(), None);
}

#[test]
fn c_programs_drive_a_daemon_over_tcp_and_shm() {
    use csx_server::{ListenAddr, Server, ServerConfig};
    let work = tempfile::tempdir().unwrap();
    let (exe, elf) = build(work.path());
    let dir = device_dir(work.path());
    let shm_name = format!("csx-capi-test-{}", std::process::id());
    let server = Server::open(
        &dir,
        ServerConfig {
            listen: vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Shm(shm_name),
            ],
            token: None,
        },
    )
    .expect("serve the device");
    let uris = server.uris().to_vec();
    assert_eq!(uris.len(), 2, "{uris:?}");
    for (i, uri) in uris.iter().enumerate() {
        // The device mounted with FUSE (as `csx mount` does): csGetCSxFromPath of a file
        // in the mount names the device.
        let mnt = work.path().join(format!("mnt{i}"));
        std::fs::create_dir(&mnt).unwrap();
        let fs = std::sync::Arc::new(csx_fs::MetalFs::new(Device::open(uri).unwrap()));
        let mounted = csx_fs::mount::spawn(fs, &mnt).unwrap_or_else(|e| {
            panic!("cannot mount with FUSE ({e}): this test needs /dev/fuse and root or fusermount3; run scripts/setup.sh")
        });
        let sub = mnt.join(format!("sub{i}"));
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("f"), b"x").unwrap();
        run_api_test(&exe, &elf, uri, Some(&sub.join("f")));
        mounted.unmount().expect("unmount");
    }
    server.shutdown().unwrap();
}

#[test]
fn mount_sources_decode_as_csx_fs_encodes_them() {
    for uri in [
        "tcp://[::1]:4420",
        "shm://a,b",
        "/state dir/with\\odd\tbytes%/ü",
    ] {
        let name = csx_fs::mount::encode_fs_name(uri);
        assert_eq!(
            csx_capi::manage::device_of_mount_source(name.as_bytes()).as_deref(),
            Some(uri),
            "{name}"
        );
    }
}

/// The filter through the Rust host API (what `csx exec` does): (count, sum) kept.
fn filter_through_rust(dir: &Path, elf: &Path, lo: u64, hi: u64) -> (u64, u64) {
    use csx_host::proto::{EngineKind, ProgramType};
    use csx_host::ExecuteRequest;
    let dev = Device::open(dir.to_str().unwrap()).unwrap();
    let image = std::fs::read(elf).unwrap();
    let pind = dev
        .load_program_any_slot(ProgramType::Elf, &image, None)
        .unwrap();
    dev.activate(pind, EngineKind::Interpreter).unwrap();
    let input = dev.alloc(N * 8).unwrap();
    let output = dev.alloc(N * 8).unwrap();
    dev.copy_file_to_mem("/data/nums", 0, N * 8, input, 0)
        .unwrap();
    let run = dev
        .execute(
            &ExecuteRequest::new(pind)
                .window(input, 0, N * 8)
                .window(output, 0, N * 8)
                .cparams(lo, hi),
        )
        .unwrap();
    assert!(!run.trapped(), "{run:?}");
    let kept = dev.read_mem(output, 0, run.r0).unwrap();
    let values: Vec<u64> = kept
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    dev.unload(pind).unwrap();
    dev.close().unwrap();
    (values.len() as u64, values.iter().sum())
}

/// Compiles an SDK program (sdk/programs) to eBPF.
fn bpf_program(work: &Path, name: &str) -> PathBuf {
    let elf = work.join(format!("{name}.o"));
    compile_bpf(&repo().join(format!("sdk/programs/{name}.c")), &elf);
    elf
}

/// Compiles the C program `source` to the eBPF object `elf` the way every csx compile
/// does (csx-build's flags, through csx-testkit), with the SDK's headers.
fn compile_bpf(source: &Path, elf: &Path) {
    let object = csx_testkit::tools::compile_program(source);
    std::fs::write(elf, object).unwrap();
}

/// The examples of sdk/examples, installed with `make install-files` and built with
/// pkg-config's flags (and one linked with libcsx.a, statically), give `csx exec`'s
/// answer (the Rust API's) on an embedded device and a daemon over tcp and shm.
#[test]
fn the_sdk_examples_install_build_and_match_the_rust_api() {
    let work = tempfile::tempdir().unwrap();
    let (_, filter) = build(work.path());
    let filter_aggregate = bpf_program(work.path(), "filter_aggregate");
    let prefix = work.path().join("prefix");
    run_tool(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(repo())
            .arg("install-files")
            .arg(format!("PREFIX={}", prefix.display()))
            .arg(format!("CSX_LIB_DIR={}", lib_dir().display())),
    );
    for f in [
        "lib/libcsx.so",
        "lib/libcsx.a",
        "include/cs_api.h",
        "include/cs_api_v05.h",
        "lib/pkgconfig/csx.pc",
    ] {
        assert!(prefix.join(f).is_file(), "make install-files left no {f}");
    }
    let pkg_config = |args: &[&str]| {
        let out = run_tool(
            Command::new("pkg-config")
                .args(args)
                .arg("csx")
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let flags = pkg_config(&["--cflags", "--libs"]);
    assert!(flags.contains("-lcsx"), "{flags}");
    let cc = |source: &str, exe: &Path, link: &[String]| {
        run_tool(
            Command::new("gcc")
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread"])
                .arg(repo().join("sdk/examples").join(source))
                .args(link)
                .arg("-o")
                .arg(exe),
        );
    };
    let mut shared: Vec<String> = flags.split_whitespace().map(str::to_string).collect();
    shared.push(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
    let examples = [
        ("filter_offload.c", &filter),
        ("async_callbacks.c", &filter),
        ("batch.c", &filter_aggregate),
    ];
    let mut programs: Vec<(String, PathBuf, &PathBuf)> = Vec::new();
    for (source, elf) in examples {
        let exe = work.path().join(source.trim_end_matches(".c"));
        cc(source, &exe, &shared);
        programs.push((source.to_string(), exe, elf));
    }
    // Static: libcsx.a and its private libraries; no rpath, so it cannot find libcsx.so.
    let mut static_link: Vec<String> = pkg_config(&["--cflags"])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    static_link.push(prefix.join("lib/libcsx.a").display().to_string());
    let private = pkg_config(&["--static", "--libs-only-l"]);
    static_link.extend(
        private
            .split_whitespace()
            .filter(|l| *l != "-lcsx")
            .map(str::to_string),
    );
    let static_exe = work.path().join("batch_static");
    cc("batch.c", &static_exe, &static_link);
    programs.push(("batch.c (libcsx.a)".into(), static_exe, &filter_aggregate));

    let dir = device_dir(work.path());
    let (lo, hi) = (250u64, 749u64);
    let expected: Vec<u64> = (0..N).filter(|x| (lo..=hi).contains(x)).collect();
    let reference = (expected.len() as u64, expected.iter().sum::<u64>());
    let line = format!("kept {} sum {}", reference.0, reference.1);
    let run_all = |uri: &str| {
        for (name, exe, elf) in &programs {
            let out = run_tool(
                Command::new(exe)
                    .arg(uri)
                    .arg(elf)
                    .arg("/data/nums")
                    .arg((N * 8).to_string())
                    .arg(lo.to_string())
                    .arg(hi.to_string())
                    .env_remove("LD_LIBRARY_PATH"),
            );
            let got = String::from_utf8(out.stdout).unwrap();
            assert_eq!(got.trim(), line, "{name} on {uri}");
        }
    };
    run_all(dir.to_str().unwrap());
    assert_eq!(filter_through_rust(&dir, &filter, lo, hi), reference);
    // The same answers from a daemon, over tcp and shm.
    use csx_server::{ListenAddr, Server, ServerConfig};
    let server = Server::open(
        &dir,
        ServerConfig {
            listen: vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Shm(format!("csx-capi-example-{}", std::process::id())),
            ],
            token: None,
        },
    )
    .expect("serve the device");
    for uri in server.uris().to_vec() {
        run_all(&uri);
    }
    server.shutdown().unwrap();
}

/// `abi_table.h`: csx-capi's table of enum values and structure offsets as static
/// assertions over the names the spec-shaped header `tests/c/spec/cs.h` declares (its
/// identifiers; structures, fields and enumerators it lacks are csx's own and skipped).
fn abi_table(spec_header: &str) -> (String, usize) {
    use csx_capi::header::{enums, layouts, Mode};
    use std::collections::HashSet;
    let tokens: HashSet<&str> = spec_header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut t = String::from("/* Generated by tests/c_api.rs from csx-capi's table. */\n");
    let mut checks = 0;
    for (_, values) in enums() {
        for (name, value) in values {
            if tokens.contains(name) {
                t.push_str(&format!(
                    "_Static_assert({name} == {value}, \"{name} is {value} in libcsx\");\n"
                ));
                checks += 1;
            }
        }
    }
    for (ty, size, fields, mode) in layouts() {
        if mode == Mode::V05 || !tokens.contains(ty) {
            continue;
        }
        t.push_str(&format!(
            "_Static_assert(sizeof({ty}) == {size}, \"sizeof({ty}) is {size} in libcsx\");\n"
        ));
        checks += 1;
        for (field, off) in fields {
            // CsComputeRequest's v0.5 names for its fields (csx's header has both).
            let alias = ty == "CsComputeRequest" && matches!(field, "CSEHandle" | "FunctionId");
            if tokens.contains(field) && !alias {
                t.push_str(&format!(
                    "_Static_assert(offsetof({ty}, {field}) == {off}, \"{ty}.{field} is at {off} in libcsx\");\n"
                ));
                checks += 1;
            }
        }
    }
    (t, checks)
}

/// A program built against a spec-shaped header (not csx's), its enum values and
/// structure offsets asserted against libcsx's table, runs its copy, storage, compute,
/// batch and mapping flow on an embedded device and a daemon over tcp and shm.
#[test]
fn a_binary_built_against_a_spec_header_runs() {
    let work = tempfile::tempdir().unwrap();
    let (_, elf) = build(work.path());
    let spec_dir = repo().join("crates/capi/tests/c/spec");
    let spec = std::fs::read_to_string(spec_dir.join("cs.h")).unwrap();
    let (table, checks) = abi_table(&spec);
    assert!(
        checks > 150,
        "only {checks} checks: the table and the header do not meet"
    );
    std::fs::write(work.path().join("abi_table.h"), table).unwrap();
    let exe = work.path().join("abi_test");
    let lib = work.path().join("lib");
    run_tool(
        Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(&spec_dir)
            .arg("-I")
            .arg(work.path())
            .arg(repo().join("crates/capi/tests/c/abi_test.c"))
            .arg("-L")
            .arg(&lib)
            .arg("-lcsx")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe),
    );
    let dir = device_dir(work.path());
    let run = |uri: &str| {
        let out = run_tool(Command::new(&exe).arg(uri).arg(&elf));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("abi_test: ok"), "{uri}: {stdout}");
    };
    run(dir.to_str().unwrap());
    use csx_server::{ListenAddr, Server, ServerConfig};
    let server = Server::open(
        &dir,
        ServerConfig {
            listen: vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Shm(format!("csx-capi-abi-{}", std::process::id())),
            ],
            token: None,
        },
    )
    .expect("serve the device");
    for uri in server.uris().to_vec() {
        run(&uri);
    }
    server.shutdown().unwrap();
}

/// A 24-bit BMP of `w` x `h` pixels (rows padded to 4 bytes), pixel bytes from `seed`.
fn bmp(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let row = (w * 3).div_ceil(4) * 4;
    let data = row * h;
    let mut b = Vec::new();
    b.extend_from_slice(b"BM");
    b.extend_from_slice(&(54 + data).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&54u32.to_le_bytes());
    b.extend_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(&w.to_le_bytes());
    b.extend_from_slice(&h.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    b.extend_from_slice(&[0; 24]);
    let mut x = seed;
    for _ in 0..data {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        b.push((x >> 56) as u8);
    }
    b
}

/// What rgb2gray makes of a BMP (the host's reference).
fn gray(bmp: &[u8]) -> Vec<u8> {
    let le = |at: usize, n: usize| {
        bmp[at..at + n]
            .iter()
            .rev()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)) as usize
    };
    let (offset, w, h) = (le(10, 4), le(18, 4), le(22, 4));
    let row = (w * 3).div_ceil(4) * 4;
    let mut out = bmp.to_vec();
    for y in 0..h {
        for x in 0..w {
            let at = offset + y * row + x * 3;
            let g = (29 * u32::from(bmp[at])
                + 150 * u32::from(bmp[at + 1])
                + 77 * u32::from(bmp[at + 2]))
                >> 8;
            out[at..at + 3].fill(g as u8);
        }
    }
    out
}

/// The wrapping u32 sum of the little-endian words (a partial last word zero-padded).
fn checksum(data: &[u8]) -> u32 {
    data.chunks(4).fold(0u32, |s, c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        s.wrapping_add(u32::from_le_bytes(w))
    })
}

/// A state directory whose slots hold the CSFs of tests/c/v05/csfs.c, active, under the
/// names the v0.5 programs look up; `time_limit_ms` its default execution time limit.
fn v05_device(work: &Path, name: &str, time_limit_ms: u32) -> PathBuf {
    use csx_host::proto::{EngineKind, ProgramType};
    let elf = work.join("csfs.o");
    if !elf.exists() {
        compile_bpf(&repo().join("crates/capi/tests/c/v05/csfs.c"), &elf);
    }
    let image = std::fs::read(&elf).unwrap();
    let dir = work.join(name);
    let config = DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 32 << 20,
        engines: Some(2),
        time_limit_ms: Some(time_limit_ms),
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir, config).expect("init the device");
    let engine = if dev.identify().unwrap().jit {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    for csf in ["Checksum", "sleep", "rgb2gray", "count"] {
        let pind = dev
            .load_program_any_slot(ProgramType::Elf, &image, Some(csf))
            .unwrap();
        dev.activate(pind, engine).unwrap();
        // Kept by name, as `csx program load` does: a program lives only as long as
        // its loader otherwise.
        dev.persist_program(pind, csf).unwrap();
    }
    // The fixed id the public sleep demo calls (as `csx program load sleep FILE --id 100`).
    csx_capi::fixed::reserve(&dev, 100, "sleep").unwrap();
    dev.close().unwrap();
    dir
}

/// Runs the CSF "count" for `rounds` through the C entry point (csQueueComputeRequest).
fn count_through_c(device: &str, rounds: u64) -> i32 {
    use csx_capi::api::{csCloseCSx, csOpenCSx};
    use csx_capi::manage::csGetFunction;
    use csx_capi::types::*;
    let name = std::ffi::CString::new(device).unwrap();
    let mut dev: CsDevHandle = std::ptr::null_mut();
    // SAFETY: a string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut dev) };
    assert_eq!(opened, 0);
    let mut id = 0u32;
    // SAFETY: a string and a writable id.
    let found = unsafe { csGetFunction(dev, c"count".as_ptr(), std::ptr::null_mut(), &mut id) };
    assert_eq!(found, 0);
    let (status, _) = compute_id(dev, id, rounds);
    assert_eq!(csCloseCSx(dev), 0);
    status
}

/// v0.5 programs written as the public SNIA demos are (tests/c/v05: the same calls and
/// structure usage as rick-heig/nvme_csd's sleep and checksum and petaio-tw/spdk_csd's
/// r2g) compile unchanged against cs_api_v05.h and give the host's answers on an
/// embedded device and a daemon over shm; over tcp, which cannot map device memory, the
/// mapping programs fail cleanly and sleep runs. The device's own time limit bounds a C
/// request, and no instruction budget cuts a long one short.
#[test]
fn v05_programs_compile_unchanged_and_run() {
    let work = tempfile::tempdir().unwrap();
    build(work.path());
    let lib = work.path().join("lib");
    let exe = |name: &str| -> PathBuf {
        let exe = work.path().join(format!("v05_{name}"));
        run_tool(
            Command::new("gcc")
                .args(["-std=gnu11", "-Wall", "-Werror", "-O1", "-I"])
                .arg(repo().join("sdk/include"))
                .arg(repo().join(format!("crates/capi/tests/c/v05/{name}.c")))
                .arg("-L")
                .arg(&lib)
                .arg("-lcsx")
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-o")
                .arg(&exe),
        );
        exe
    };
    let (sleep, sum, r2g) = (exe("sleep"), exe("checksum"), exe("r2g"));
    let dir = v05_device(work.path(), "dev", 20_000);

    // Inputs: three files for checksum, six BMPs for r2g.
    let mut files = Vec::new();
    for (i, len) in [32usize, 1 << 20, 1_000_003].into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|j| (j * 7 + i * 13 + j / 251) as u8).collect();
        let path = work.path().join(format!("in{i}.bin"));
        std::fs::write(&path, &data).unwrap();
        files.push((path, checksum(&data)));
    }
    let images = work.path().join("images");
    std::fs::create_dir(&images).unwrap();
    let sizes = [(1, 1), (3, 2), (17, 5), (64, 33), (100, 7), (255, 3)];
    let mut expected = Vec::new();
    for (i, (w, h)) in sizes.into_iter().enumerate() {
        let b = bmp(w, h, i as u64 + 1);
        std::fs::write(images.join(format!("img_{i}.bmp")), &b).unwrap();
        expected.push(gray(&b));
    }
    let output = |cmd: &mut Command| {
        let out = cmd.output().expect("run a v0.5 program");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let check_all = |path: &str, maps: bool| {
        for (file, want) in &files {
            let (ok, out) = output(
                Command::new(&sum)
                    .args(["-d", path, "-i", "2", "-f"])
                    .arg(file),
            );
            if maps {
                assert!(ok, "{path}: {out}");
                assert_eq!(
                    out.trim().lines().last(),
                    Some(format!("checksum {want:#010x}").as_str()),
                    "{path}"
                );
            } else {
                assert!(!ok && out.contains("AFDM alloc error (1)"), "{path}: {out}");
            }
        }
        for i in 0..sizes.len() {
            let _ = std::fs::remove_file(images.join(format!("gray_img_{i}.bmp")));
        }
        let (ok, out) = output(Command::new(&r2g).arg(path).arg(&images));
        assert_eq!(ok, maps, "{path}: {out}");
        if maps {
            assert!(out.contains("func list:Checksum,sleep,rgb2gray"), "{out}");
            for (i, want) in expected.iter().enumerate() {
                let got = std::fs::read(images.join(format!("gray_img_{i}.bmp"))).unwrap();
                assert!(
                    &got == want,
                    "{path}: gray_img_{i}.bmp differs from the host's"
                );
            }
        }
        let (ok, out) = output(Command::new(&sleep).args(["-d", path, "-l", "250"]));
        assert!(ok && out.contains("slept 250 ms"), "{path}: {out}");
    };
    let path = dir.to_str().unwrap();
    check_all(path, true);
    // A long compute runs to its end under the device's time limit: no fixed instruction
    // budget (the device's default fuel, 2e8) stops a C request of some 5e8 instructions.
    assert_eq!(
        count_through_c(path, 100_000_000),
        csx_capi::status::CS_SUCCESS
    );

    use csx_server::{ListenAddr, Server, ServerConfig};
    let server = Server::open(
        &dir,
        ServerConfig {
            listen: vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Shm(format!("csx-capi-v05-{}", std::process::id())),
            ],
            token: None,
        },
    )
    .expect("serve the device");
    for uri in server.uris().to_vec() {
        check_all(&uri, uri.starts_with("shm://"));
    }
    server.shutdown().unwrap();

    // A device whose time limit is 300 ms ends a 2 s request: the C request names no
    // limit of its own, so the device's applies.
    let short = v05_device(work.path(), "short", 300);
    let (ok, out) =
        output(Command::new(&sleep).args(["-d", short.to_str().unwrap(), "-l", "2000"]));
    assert!(
        !ok && out.contains(&format!(
            "Compute exec error ({})",
            csx_capi::status::CS_ERROR_IN_EXECUTION
        )),
        "{out}"
    );
}

#[test]
fn c_programs_open_an_array_by_its_uri() {
    let work = tempfile::tempdir().unwrap();
    let exe = c_client(work.path(), "array_test");
    let dir = work.path().join("arr");
    let member_nvm = 8u64 << 20;
    let config = DeviceConfig {
        nvm_size_bytes: member_nvm,
        slm_size_bytes: 1 << 20,
        ..DeviceConfig::default()
    };
    csx_array::Array::init_embedded(&dir, 2, config, csx_array::LinkModel::default())
        .unwrap()
        .close()
        .unwrap();
    let uri = format!("array:{}", dir.display());
    let out = run_tool(Command::new(&exe).arg(&uri).arg(member_nvm.to_string()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("array_test: ok"), "{stdout}");
}

/// A mapped allocation on `uri` is the device memory itself: what the host writes through
/// the mapping the device reads with no request of libcsx's in between, and the reverse;
/// another client cannot get its memory file; a free unmaps it and a new allocation
/// starts zeroed.
fn a_mapping_is_the_device_memory(uri: &str) {
    use csx_capi::api::{csAllocMem, csCloseCSx, csFreeMem, csOpenCSx};
    use csx_capi::registry;
    use csx_capi::status::CS_SUCCESS;
    use std::ptr::{null, null_mut};
    let name = std::ffi::CString::new(uri).unwrap();
    let mut dev = null_mut();
    // SAFETY: a C string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), null_mut(), &mut dev) };
    assert_eq!(opened, CS_SUCCESS);
    let alloc = |bytes: i32| {
        let (mut mem, mut vaddr) = (null_mut(), null_mut());
        // SAFETY: writable outputs, no flags.
        let st = unsafe { csAllocMem(dev, bytes, null(), &mut mem, &mut vaddr) };
        assert_eq!(st, CS_SUCCESS, "{uri}");
        assert!(!vaddr.is_null());
        (mem, vaddr.cast::<u8>())
    };
    let (mem, at) = alloc(100);
    let (handle, device) = registry::with(|r| {
        let m = &r.mems[&registry::key_of(mem)];
        (m.handle, std::sync::Arc::clone(&r.devices[&m.dev]))
    });
    // SAFETY: the mapping holds 100 bytes (a page), and no request is in flight.
    let mapped = |at: *mut u8| unsafe { std::slice::from_raw_parts_mut(at, 100) };
    mapped(at)[..7].copy_from_slice(b"through");
    assert_eq!(
        device.device.read_mem(handle, 0, 7).unwrap(),
        b"through",
        "{uri}"
    );
    device.device.write_mem(handle, 50, b"back").unwrap();
    assert_eq!(&mapped(at)[50..54], b"back", "{uri}");
    // Another client of the device (its own queue pair) is refused the file.
    let other = Device::open(uri).unwrap();
    let refused = other.client().share_mem(handle).unwrap_err();
    assert!(
        matches!(&refused, csx_host::TransportError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{uri}: {refused}"
    );
    other.close().unwrap();
    // SAFETY: a handle from csAllocMem.
    assert_eq!(unsafe { csFreeMem(mem, null()) }, CS_SUCCESS);
    // The mapping is gone: the page is no longer mapped in this process.
    let mut resident = 0u8;
    // SAFETY: mincore only asks about the page; ENOMEM says it is not mapped.
    let r = unsafe { libc::mincore(at.cast(), 4096, &mut resident) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ENOMEM)),
        "{uri}"
    );
    let (again, at2) = alloc(100);
    assert!(mapped(at2).iter().all(|&b| b == 0), "{uri}");
    // SAFETY: a handle from csAllocMem.
    assert_eq!(unsafe { csFreeMem(again, null()) }, CS_SUCCESS);
    assert_eq!(csCloseCSx(dev), CS_SUCCESS);
}

/// A daemon serving the device in `dir` over shm (`tag` names the queue): it and its URI.
fn serve_shm(dir: &Path, tag: &str) -> (csx_server::Server, String) {
    use csx_server::{ListenAddr, Server, ServerConfig};
    let name = format!("csx-capi-{tag}-{}", std::process::id());
    let config = ServerConfig {
        listen: vec![ListenAddr::Shm(name)],
        token: None,
    };
    let server = Server::open(dir, config).expect("serve the device");
    let uri = server.uris()[0].clone();
    (server, uri)
}

#[test]
fn a_mapping_is_the_device_memory_embedded_and_over_shm() {
    let work = tempfile::tempdir().unwrap();
    let dir = device_dir(work.path());
    a_mapping_is_the_device_memory(dir.to_str().unwrap());
    let (server, uri) = serve_shm(&dir, "map");
    a_mapping_is_the_device_memory(&uri);
    server.shutdown().unwrap();
}

/// Fixed CSF ids belong to a name in the device's file store: they survive a restart,
/// follow the name, refuse an id another name holds or one outside their range, and an
/// id nobody reserved is refused by name.
#[test]
fn fixed_csf_ids_survive_a_restart_and_refuse_misuse() {
    use csx_capi::api::{csCloseCSx, csOpenCSx};
    use csx_capi::fixed::{read, reserve, FixedIdError};
    use csx_capi::manage::csGetCSFId;
    use csx_capi::status::{CS_INVALID_ID, CS_SUCCESS};
    use csx_capi::types::CsfIdInfo;
    let work = tempfile::tempdir().unwrap();
    let dir = v05_device(work.path(), "dev", 5_000);
    // v05_device reserved 100 and closed the device: the table outlived it.
    let dev = Device::open(dir.to_str().unwrap()).unwrap();
    assert_eq!(read(&dev).unwrap(), [(100, "sleep".to_string())]);
    let taken = reserve(&dev, 100, "count").unwrap_err();
    assert!(matches!(taken, FixedIdError::Taken { .. }), "{taken}");
    assert!(taken.to_string().contains("\"sleep\""), "{taken}");
    let low = reserve(&dev, 5, "count").unwrap_err();
    assert!(low.to_string().contains("64..=65535"), "{low}");
    reserve(&dev, 101, "count").unwrap();
    reserve(&dev, 102, "count").unwrap();
    let table = read(&dev).unwrap();
    assert_eq!(
        table,
        [(100, "sleep".to_string()), (102, "count".to_string())]
    );
    dev.close().unwrap();

    let name = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut h = std::ptr::null_mut();
    // SAFETY: a C string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut h) };
    assert_eq!(opened, CS_SUCCESS);
    let csf = std::ffi::CString::new("count").unwrap();
    // SAFETY: all zeros is a valid CsfIdInfo (integers and a null pointer).
    let mut info: [CsfIdInfo; 2] = unsafe { std::mem::zeroed() };
    let (mut len, mut count) = (std::mem::size_of_val(&info) as i32, 0);
    // SAFETY: valid outputs of `len` bytes.
    let st = unsafe { csGetCSFId(h, csf.as_ptr(), 0, &mut len, &mut count, info.as_mut_ptr()) };
    assert_eq!((st, count, info[0].csf_id), (CS_SUCCESS, 1, 102));
    // SAFETY: as above, by GlobalId.
    let st = unsafe {
        csGetCSFId(
            h,
            std::ptr::null(),
            100,
            &mut len,
            &mut count,
            info.as_mut_ptr(),
        )
    };
    assert_eq!((st, count, info[0].csf_id), (CS_SUCCESS, 1, 100));
    assert_eq!(compute_id(h, 103, 0).0, CS_INVALID_ID);
    assert_eq!(csCloseCSx(h), CS_SUCCESS);
}

/// A daemon serving shm clients of every user maps device memory only into processes of
/// its own user: `tests/c/map_probe.c`, run as `nobody` (this test runs as root, as CI
/// does, and fails when it cannot switch user), is refused the mapping with
/// CS_COULD_NOT_MAP_MEMORY and still gets memory it does not ask to map.
#[test]
fn another_user_is_refused_the_shm_mapping() {
    use csx_server::{ListenAddr, Server, ServerConfig, ServerOptions};
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    assert_eq!(
        me, 0,
        "this test switches to user nobody with runuser, which needs root (CI runs as root)"
    );
    let work = tempfile::tempdir().unwrap();
    // nobody reaches the probe and its library through the work directory.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = c_client(work.path(), "map_probe");
    let dir = device_dir(work.path());
    let name = format!("csx-capi-other-user-{}", std::process::id());
    let server = Server::open_with(
        &dir,
        ServerConfig {
            listen: vec![ListenAddr::Shm(name.clone())],
            token: None,
        },
        ServerOptions::default().shm_other_users(true),
    )
    .expect("serve the device to every user");
    // The daemon serving other users opened its socket directory to them (search only).
    let sockets = csx_host::transport::shm::socket_dir();
    let mode = std::fs::metadata(&sockets).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode & 0o077, 0o011, "{}: mode {mode:o}", sockets.display());
    let out = run_tool(
        Command::new("runuser")
            .args(["-u", "nobody", "--", "env"])
            .arg(format!("CSX_SHM_DIR={}", sockets.display()))
            .arg(&exe)
            .arg(format!("shm://{name}")),
    );
    server.shutdown().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("map_probe: ok"), "{stdout}");
    let refused = stdout
        .lines()
        .find(|l| l.contains("refused"))
        .unwrap_or_default();
    assert!(
        !refused.contains("uid 0 ") && refused.contains("its own user"),
        "{stdout}"
    );
}

/// Runs CSF `id` with `rounds` on the open device handle `h`: the status and r0.
fn compute_id(h: csx_capi::types::CsDevHandle, id: u32, rounds: u64) -> (i32, u64) {
    use csx_capi::api::csQueueComputeRequest;
    use csx_capi::types::*;
    let req = CsComputeRequest {
        dev_handle: h,
        csf_id: id,
        num_args: 1,
        args: [CsComputeArg {
            type_: CS_64BIT_VALUE_TYPE,
            u: CsComputeArgValue { value64: rounds },
        }],
    };
    let mut r0 = 0u64;
    // SAFETY: a request with its one argument, synchronous.
    let status = unsafe {
        csQueueComputeRequest(
            &req,
            std::ptr::null_mut(),
            None,
            std::ptr::null_mut(),
            &mut r0,
        )
    };
    (status, r0)
}

/// A fixed id's slot is looked up once per device handle (the table is read again only
/// by a fresh handle, shown here by taking the table away), again when the run finds
/// its slot emptied behind the handle's back (the program moved to another slot), and
/// again after the handle unloads the slot itself.
#[test]
fn a_fixed_id_is_looked_up_once_per_handle_and_again_when_its_slot_empties() {
    use csx_capi::api::{csCloseCSx, csOpenCSx};
    use csx_capi::fixed::{reserve, FIXED_IDS_PATH};
    use csx_capi::manage::csDownload;
    use csx_capi::status::{CS_INVALID_ID, CS_SUCCESS};
    use csx_capi::types::{CsDownloadInfo, CS_BPF_PROGRAM};
    use csx_host::proto::{EngineKind, ProgramType};
    let work = tempfile::tempdir().unwrap();
    let dir = v05_device(work.path(), "dev", 5_000);
    let other = Device::open(dir.to_str().unwrap()).unwrap();
    reserve(&other, 101, "count").unwrap();
    let slot_of_count = || {
        let p = other.programs().unwrap();
        p.iter()
            .find(|p| p.persistent.as_deref() == Some("count"))
            .map(|p| p.pind)
            .expect("count is loaded")
    };
    let open = || {
        let name = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let mut h = std::ptr::null_mut();
        // SAFETY: a C string and a writable handle.
        let st = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut h) };
        assert_eq!(st, CS_SUCCESS);
        h
    };
    let h = open();
    let (st, expected) = compute_id(h, 101, 10);
    assert_eq!(st, CS_SUCCESS);

    // Another host moves "count" to another slot: the run finds the old slot empty,
    // looks again and runs there.
    let old = slot_of_count();
    other.unload(old).unwrap();
    let elf = std::fs::read(work.path().join("csfs.o")).unwrap();
    let moved = csx_host::proto::ProgramIndex(csx_host::proto::limits::PROGRAM_SLOTS_COUNT - 1);
    other
        .load_program(moved, ProgramType::Elf, &elf, Some("count"))
        .unwrap();
    assert_ne!(moved, old);
    other.activate(moved, EngineKind::Interpreter).unwrap();
    other.persist_program(moved, "count").unwrap();
    assert_eq!(compute_id(h, 101, 10), (CS_SUCCESS, expected));

    // The table is not read again by this handle; a fresh one reads it.
    other.delete_file(FIXED_IDS_PATH).unwrap();
    assert_eq!(compute_id(h, 101, 10), (CS_SUCCESS, expected));
    let fresh = open();
    assert_eq!(compute_id(fresh, 101, 10).0, CS_INVALID_ID);
    assert_eq!(csCloseCSx(fresh), CS_SUCCESS);

    // The handle unloads the slot itself: the id is looked up again, and is refused.
    let unload = CsDownloadInfo {
        type_: CS_BPF_PROGRAM,
        sub_type: 0,
        index: i32::from(moved.0),
        unload: 1,
        length: 0,
        data_buffer: std::ptr::null(),
    };
    // SAFETY: a readable download description (no data to read for an unload).
    assert_eq!(unsafe { csDownload(h, &unload) }, CS_SUCCESS);
    assert_eq!(compute_id(h, 101, 10).0, CS_INVALID_ID);
    assert_eq!(csCloseCSx(h), CS_SUCCESS);
    other.close().unwrap();
}

/// A raw program that returns `r0` (mov r0, imm; exit).
fn returns(r0: i32) -> Vec<u8> {
    let mut image = vec![0xb7, 0, 0, 0];
    image.extend_from_slice(&r0.to_le_bytes());
    image.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    image
}

/// Client B unloads the program a fixed id names and loads another program into the
/// very slot between two runs of client A's long-lived handle: A never runs B's
/// program. Its next run is refused by the device (the program generation it names is
/// gone), libcsx looks the id up again and finds the name loaded nowhere (a typed
/// error); once B loads the named program again, elsewhere, A runs it there. Embedded,
/// and through a daemon (the generation crosses the wire).
#[test]
fn a_fixed_id_never_runs_a_program_another_client_put_in_its_slot() {
    let work = tempfile::tempdir().unwrap();
    let dir = v05_device(work.path(), "dev", 5_000);
    a_fixed_id_never_runs_another_program(work.path(), dir.to_str().unwrap());
    let (server, uri) = serve_shm(&dir, "replaced-slot");
    a_fixed_id_never_runs_another_program(work.path(), &uri);
    server.shutdown().unwrap();
}

fn a_fixed_id_never_runs_another_program(work: &Path, device: &str) {
    use csx_capi::api::{csCloseCSx, csOpenCSx};
    use csx_capi::status::{CS_SUCCESS, CS_UNKNOWN_COMPUTE_FUNCTION};
    use csx_host::proto::{EngineKind, ProgramType};
    const IMPOSTOR: i32 = 0x5bad;
    let b = Device::open(device).unwrap();
    csx_capi::fixed::reserve(&b, 101, "count").unwrap();
    let name = std::ffi::CString::new(device).unwrap();
    let mut a = std::ptr::null_mut();
    // SAFETY: a C string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut a) };
    assert_eq!(opened, CS_SUCCESS);
    let (st, expected) = compute_id(a, 101, 10);
    assert_eq!(st, CS_SUCCESS);
    assert_ne!(expected, IMPOSTOR as u64);

    // B replaces "count" in its own slot with a program of its own, active.
    let slot = b
        .programs()
        .unwrap()
        .into_iter()
        .find(|p| p.persistent.as_deref() == Some("count"))
        .expect("count is loaded")
        .pind;
    b.unload(slot).unwrap();
    b.load_program(slot, ProgramType::Raw, &returns(IMPOSTOR), None)
        .unwrap();
    b.activate(slot, EngineKind::Interpreter).unwrap();
    let (st, r0) = compute_id(a, 101, 10);
    assert_ne!(
        (st, r0),
        (CS_SUCCESS, IMPOSTOR as u64),
        "{device}: A ran B's program"
    );
    assert_eq!(st, CS_UNKNOWN_COMPUTE_FUNCTION, "{device}: r0 {r0}");

    // B loads "count" again into another slot: A finds it there.
    let elf = std::fs::read(work.join("csfs.o")).unwrap();
    let moved = b
        .load_program_any_slot(ProgramType::Elf, &elf, Some("count"))
        .unwrap();
    assert_ne!(moved, slot);
    b.activate(moved, EngineKind::Interpreter).unwrap();
    b.persist_program(moved, "count").unwrap();
    assert_eq!(compute_id(a, 101, 10), (CS_SUCCESS, expected), "{device}");
    // B's program still answers by its slot (a slot id names whatever the slot holds).
    assert_eq!(
        compute_id(a, u32::from(slot.0), 0),
        (CS_SUCCESS, IMPOSTOR as u64)
    );
    assert_eq!(csCloseCSx(a), CS_SUCCESS);
    b.unload(slot).unwrap();
    b.close().unwrap();
}

/// Map requests with hostile values get typed refusals and never wedge the daemon:
/// handles that are nobody's, another client's, not whole pages; a thousand repeats of a
/// good one; allocations of zero, negative and huge sizes asked mapped through libcsx.
/// The daemon serves every client after all of it.
#[test]
fn hostile_map_requests_get_typed_refusals_and_the_daemon_serves_on() {
    use csx_capi::api::{csAllocMem, csCloseCSx, csOpenCSx};
    use csx_capi::status::{CS_INVALID_LENGTH, CS_NOT_ENOUGH_MEMORY, CS_SUCCESS};
    use csx_host::proto::MemHandle;
    use std::io::ErrorKind;
    let work = tempfile::tempdir().unwrap();
    let dir = device_dir(work.path());
    let (server, uri) = serve_shm(&dir, "hostile-map");
    let dev = Device::open(&uri).unwrap();
    let refused = |h: MemHandle| match dev.client().share_mem(h) {
        Err(csx_host::TransportError::Io { source, .. }) => (source.kind(), source.to_string()),
        other => panic!("map of {h:?}: {other:?}"),
    };
    for h in [0, 1, 12345, u32::MAX] {
        let (kind, message) = refused(MemHandle(h));
        assert_eq!(kind, ErrorKind::NotFound, "{h}: {message}");
    }
    let not_pages = dev.alloc(100).unwrap();
    let (kind, message) = refused(not_pages);
    assert_eq!(kind, ErrorKind::InvalidInput, "{message}");
    assert!(message.contains("whole pages"), "{message}");
    let theirs = Device::open(&uri).unwrap();
    let their_page = theirs.alloc(4096).unwrap();
    assert_eq!(refused(their_page).0, ErrorKind::NotFound);
    // A good request again and again: each answered with the one memory file.
    let page = dev.alloc(4096).unwrap();
    for _ in 0..1000 {
        drop(dev.client().share_mem(page).unwrap());
    }
    // Sizes through libcsx, mapped: refused by value, nothing allocated.
    let name = std::ffi::CString::new(uri.as_str()).unwrap();
    let mut h = std::ptr::null_mut();
    // SAFETY: a C string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut h) };
    assert_eq!(opened, CS_SUCCESS);
    let free_before = dev.identify().unwrap().slm_free_bytes;
    for (bytes, expected) in [
        (0, CS_INVALID_LENGTH),
        (-1, CS_INVALID_LENGTH),
        (i32::MIN, CS_INVALID_LENGTH),
        (i32::MAX, CS_NOT_ENOUGH_MEMORY),
        (32 << 20, CS_NOT_ENOUGH_MEMORY),
    ] {
        let (mut mem, mut va) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: writable outputs, no flags.
        let st = unsafe { csAllocMem(h, bytes, std::ptr::null(), &mut mem, &mut va) };
        assert_eq!(
            (st, mem.is_null(), va.is_null()),
            (expected, true, true),
            "{bytes}"
        );
    }
    assert_eq!(dev.identify().unwrap().slm_free_bytes, free_before);
    assert_eq!(csCloseCSx(h), CS_SUCCESS);
    // Every client is still served, and the mapping still works.
    theirs.close().unwrap();
    assert_eq!(dev.read_mem(page, 0, 4).unwrap(), [0; 4]);
    drop(dev.client().share_mem(page).unwrap());
    dev.close().unwrap();
    let late = Device::open(&uri).unwrap();
    late.identify().unwrap();
    late.close().unwrap();
    server.shutdown().unwrap();
}

/// One device handle's calls run at once: while a compute request busy-waits 3 s on one
/// engine, another thread allocates, frees and runs a compute on the other engine
/// through the same handle and is done before it (the handle's session is locked only
/// to submit, never while an execution runs).
#[test]
fn calls_on_one_handle_run_while_its_long_compute_runs() {
    use csx_capi::api::{csAllocMem, csCloseCSx, csFreeMem, csOpenCSx};
    use csx_capi::status::CS_SUCCESS;
    use std::sync::atomic::{AtomicBool, Ordering};
    let work = tempfile::tempdir().unwrap();
    let dir = v05_device(work.path(), "dev", 10_000);
    let name = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut h = std::ptr::null_mut();
    // SAFETY: a C string and a writable handle.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut h) };
    assert_eq!(opened, CS_SUCCESS);
    let key = h as usize;
    let long_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let long = scope.spawn(|| {
            // id 100 is "sleep": cparam1 milliseconds.
            let result = compute_id(key as csx_capi::types::CsDevHandle, 100, 3_000);
            long_done.store(true, Ordering::SeqCst);
            result
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let h = key as csx_capi::types::CsDevHandle;
        let (mut mem, mut va) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: writable outputs, no flags.
        let st = unsafe { csAllocMem(h, 4096, std::ptr::null(), &mut mem, &mut va) };
        assert_eq!(st, CS_SUCCESS);
        // SAFETY: a handle from csAllocMem.
        assert_eq!(unsafe { csFreeMem(mem, std::ptr::null()) }, CS_SUCCESS);
        assert_eq!(compute_id(h, 100, 0), (CS_SUCCESS, 0));
        assert!(
            !long_done.load(Ordering::SeqCst),
            "the short calls waited for the long compute"
        );
        assert_eq!(long.join().unwrap(), (CS_SUCCESS, 0));
    });
    assert_eq!(csCloseCSx(h), CS_SUCCESS);
}
