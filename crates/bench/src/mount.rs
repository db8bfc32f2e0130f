//! `csx bench mount`: sequential read of a warm file through the FUSE mount (csx-fs)
//! against `csx get` of the same file (the goal: the mount reaches at least half of
//! get's throughput).
//!
//! Method: a fresh embedded device in a temporary directory holds one file of `--size`
//! bytes of seeded data. Both ways copy it into a local file in the same temporary
//! directory, `--runs` times each after one warm-up, and the best run counts (the others
//! are printed): `get` is `Device::get_file` (pipelined reads of `FILE_IO_SIZE_MAX`);
//! `mount` is `std::io::copy` from the file under a mount of the same device, served in
//! this process on background threads. Both outputs are compared with the data.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use csx_fs::{mount, MetalFs};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;

use crate::exit;

/// Measure sequential reads through `csx fs mount` against `csx get`.
#[derive(Debug, clap::Args)]
pub struct MountBenchArgs {
    /// Bytes of the file (the goal is stated for 1 GiB; accepts KiB, MiB, GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    size: u64,
    /// Timed runs of each way (after one warm-up run).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = if let Some(n) = s.strip_suffix("GiB") {
        (n, 1u64 << 30)
    } else if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (s, 1)
    };
    let n: u64 = num.trim().parse().map_err(|e| format!("size {s:?}: {e}"))?;
    let bytes = n.checked_mul(mult).ok_or(format!("size {s:?} overflows"))?;
    if bytes == 0 || bytes > 8 << 30 {
        return Err(format!("size {s:?}: must be 1 byte .. 8 GiB"));
    }
    Ok(bytes)
}

fn data_chunk(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const CHUNK: usize = 16 << 20;

fn same_as_data(path: &Path, size: u64) -> anyhow::Result<bool> {
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut i = 0u64;
    let mut seen = 0u64;
    loop {
        let want = (size - seen).min(CHUNK as u64) as usize;
        if want == 0 {
            let mut extra = [0u8; 1];
            return Ok(f.read(&mut extra)? == 0);
        }
        f.read_exact(&mut buf[..want])?;
        if buf[..want] != data_chunk(i, want)[..] {
            return Ok(false);
        }
        seen += want as u64;
        i += 1;
    }
}

fn timed(runs: u32, mut work: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    work()?;
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            work()?;
            Ok(start.elapsed())
        })
        .collect()
}

fn mib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

pub fn run(args: MountBenchArgs) -> anyhow::Result<u8> {
    let tmp = tempfile::tempdir().context("cannot make a temporary directory")?;
    let dev = device_with_data(&tmp.path().join("dev"), args.size)?;
    let out = tmp.path().join("out");
    let get = timed(args.runs, || {
        dev.get_file("/data", &out, &mut |_| {})?;
        Ok(())
    })?;
    if !same_as_data(&out, args.size)? {
        bail!("csx get returned other bytes than were written");
    }
    let via_mount = time_mount(dev, tmp.path(), &out, args.runs)?;
    if !same_as_data(&out, args.size)? {
        bail!("the mount returned other bytes than were written");
    }
    print_report(&args, &get, &via_mount);
    Ok(exit::SUCCESS)
}

/// A fresh embedded device in `state` holding `/data`: `size` bytes of seeded data.
fn device_with_data(state: &Path, size: u64) -> anyhow::Result<Device> {
    let nvm = (size.div_ceil(4096) * 4096 + (64 << 20)).next_power_of_two();
    let dev = Device::init(
        state,
        DeviceConfig {
            nvm_size_bytes: nvm,
            slm_size_bytes: 16 << 20,
            state_size_bytes: 4096,
            ..DeviceConfig::default()
        },
    )
    .context("cannot create the benchmark device")?;
    let mut off = 0u64;
    let mut i = 0u64;
    while off < size {
        let len = (size - off).min(CHUNK as u64) as usize;
        dev.write_file("/data", off, &data_chunk(i, len))?;
        off += len as u64;
        i += 1;
    }
    dev.flush()?;
    Ok(dev)
}

/// Mounts `dev` under `tmp`, times `runs` copies of `/data` through the mount into
/// `out`, unmounts and closes the device.
fn time_mount(dev: Device, tmp: &Path, out: &Path, runs: u32) -> anyhow::Result<Vec<Duration>> {
    let fs = Arc::new(MetalFs::new(dev));
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt)?;
    let mounted = mount::spawn(Arc::clone(&fs), &mnt).context(
        "cannot mount with FUSE: needs /dev/fuse and root or fusermount3 (scripts/setup.sh)",
    )?;
    let through = mnt.join("data");
    let via_mount = timed(runs, || {
        let mut src = fs::File::open(&through)?;
        let mut dst = fs::File::create(out)?;
        std::io::copy(&mut src, &mut dst)?;
        dst.sync_all()?;
        Ok(())
    });
    mounted.unmount()?;
    let via_mount = via_mount?;
    Arc::try_unwrap(fs)
        .map_err(|_| anyhow::anyhow!("the mount still holds the device"))?
        .close()?;
    Ok(via_mount)
}

fn print_report(args: &MountBenchArgs, get: &[Duration], via_mount: &[Duration]) {
    let best = |v: &[Duration]| v.iter().copied().min().unwrap_or_default();
    let (g, m) = (best(get), best(via_mount));
    let ratio = mib_s(args.size, m) / mib_s(args.size, g);
    if args.json {
        let ms = |v: &[Duration]| v.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
        println!(
            "{}",
            serde_json::json!({
                "size_bytes": args.size,
                "runs": args.runs,
                "get_ms": ms(get),
                "mount_ms": ms(via_mount),
                "get_mib_s": mib_s(args.size, g),
                "mount_mib_s": mib_s(args.size, m),
                "mount_over_get": ratio,
                "goal_mount_over_get": 0.5,
            })
        );
        return;
    }
    let list = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "sequential read of a warm {} MiB file into a local file",
        args.size >> 20
    );
    println!("{:<8} {:>10} {:>12}  runs (ms)", "way", "best ms", "MiB/s");
    for (way, best, runs) in [("get", g, get), ("mount", m, via_mount)] {
        println!(
            "{:<8} {:>10.1} {:>12.1}  {}",
            way,
            best.as_secs_f64() * 1e3,
            mib_s(args.size, best),
            list(runs)
        );
    }
    println!("mount / get throughput: {ratio:.2} (goal >= 0.50)");
}
