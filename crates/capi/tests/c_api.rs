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

/// Builds the C test and the filter program into `work`: (api_test, filter.o).
fn build(work: &Path) -> (PathBuf, PathBuf) {
    let lib = work.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::copy(lib_dir().join("libcsx_capi.so"), lib.join("libcsx.so")).unwrap();
    let exe = work.join("api_test");
    run_tool(
        Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(repo().join("sdk/include"))
            .arg(repo().join("crates/capi/tests/c/api_test.c"))
            .arg("-L")
            .arg(&lib)
            .arg("-lcsx")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe),
    );
    let elf = work.join("filter.o");
    run_tool(
        Command::new("clang")
            .args(["-O2", "-target", "bpf", "-c", "-I"])
            .arg(repo().join("sdk/include"))
            .arg(repo().join("sdk/programs/filter.c"))
            .arg("-o")
            .arg(&elf),
    );
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

fn run_api_test(exe: &Path, elf: &Path, uri: &str) {
    let out = run_tool(Command::new(exe).arg(uri).arg(elf).env("CSX_DEVICES", uri));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("api_test: ok"), "{uri}: {stdout}");
}

#[test]
fn c_programs_drive_an_embedded_device() {
    let work = tempfile::tempdir().unwrap();
    let (exe, elf) = build(work.path());
    let dir = device_dir(work.path());
    run_api_test(&exe, &elf, dir.to_str().unwrap());
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
    for uri in &uris {
        run_api_test(&exe, &elf, uri);
    }
    server.shutdown().unwrap();
}
