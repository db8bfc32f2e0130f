//! Which device a command talks to, and byte sizes on the command line.
//!
//! The device is `--device URI`, else `$CSX_DEVICE` (clap reads both into
//! `GlobalArgs::device`), else the per-user embedded device in
//! `$XDG_DATA_HOME/csx/device` (`~/.local/share/csx/device`), created with
//! [`default_config`] the first time a command needs it, with a note on stderr.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;

use crate::GlobalArgs;

/// NVM namespace of the per-user device: sparse, so it costs only what files use.
pub const DEFAULT_NVM_SIZE: u64 = 4 << 30;

/// Memory namespace of the per-user device: reserved lazily by the OS.
pub const DEFAULT_SLM_SIZE: u64 = 1 << 30;

/// Shared state of the per-user device.
pub const DEFAULT_STATE_SIZE: u64 = 1 << 20;

/// The configuration of a device created without explicit sizes.
pub fn default_config() -> DeviceConfig {
    DeviceConfig {
        nvm_size_bytes: DEFAULT_NVM_SIZE,
        slm_size_bytes: DEFAULT_SLM_SIZE,
        state_size_bytes: DEFAULT_STATE_SIZE,
        ..DeviceConfig::default()
    }
}

/// The per-user device's state directory.
pub fn default_device_dir() -> anyhow::Result<PathBuf> {
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither --device, CSX_DEVICE, XDG_DATA_HOME nor HOME is set")?;
            PathBuf::from(home).join(".local/share")
        }
    };
    Ok(data.join("csx/device"))
}

/// The array the command line names, if it names one: `--device array:DIR`, or a
/// `--device DIR` that holds an array (`array.json`).
pub fn array_dir(global: &GlobalArgs) -> Option<PathBuf> {
    let uri = global.device.as_deref()?;
    if let Some(dir) = uri.strip_prefix("array:") {
        return Some(PathBuf::from(dir));
    }
    let dir = PathBuf::from(uri);
    (!uri.contains("://") && csx_array::desc::is_array(&dir)).then_some(dir)
}

/// Opens the device the command line names (see the module doc).
pub fn open(global: &GlobalArgs) -> anyhow::Result<Device> {
    if let Some(dir) = array_dir(global) {
        bail!(
            "{} is an array: this command takes one device (arrays work with put, get, ls, stat, rm, sort)",
            dir.display()
        );
    }
    if let Some(uri) = &global.device {
        return Device::open(uri).with_context(|| format!("cannot open device {uri}"));
    }
    let dir = default_device_dir()?;
    let uri = dir
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", dir.display()))?;
    if !csx_host::transport::inproc::is_initialized(&dir) {
        let config = default_config();
        let dev = Device::init(&dir, config.clone())
            .with_context(|| format!("cannot create the default device in {}", dir.display()))?;
        eprintln!(
            "csx: created a device at {} (nvm {}, slm {}); choose another with --device or CSX_DEVICE",
            dir.display(),
            format_size(config.nvm_size_bytes),
            format_size(config.slm_size_bytes),
        );
        return Ok(dev);
    }
    Device::open(uri).with_context(|| format!("cannot open device {uri}"))
}

/// Parses a byte size: a number with an optional binary unit, `4096`, `64KiB`, `256MiB`,
/// `1GiB`, `2TiB` (`K`, `M`, `G`, `T`, with or without `iB`/`B`, all powers of 1024).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        bail!("size {text:?} does not start with a number");
    }
    let n: u64 = digits
        .parse()
        .with_context(|| format!("size {text:?} is too large"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => bail!("size {text:?} has unknown unit {other:?} (use KiB, MiB, GiB or TiB)"),
    };
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("size {text:?} is too large"))
}

/// A size for people: the largest binary unit that divides it, else bytes with one
/// decimal of the nearest unit.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {name}", bytes >> shift);
        }
    }
    for (name, shift) in UNITS {
        if bytes >= 1 << shift {
            return format!("{:.1} {name}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("2 TiB").unwrap(), 2 << 40);
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("1PiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(100), "100 B");
    }
}
