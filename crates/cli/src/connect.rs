//! Which device a command talks to, and byte sizes on the command line.
//!
//! The device is `--device URI` (after the command, else before it: the old place),
//! else `$CSX_DEVICE`, else the per-user embedded device in
//! `$XDG_DATA_HOME/csx/device` (`~/.local/share/csx/device`), created with
//! [`default_config`] the first time a command needs it, with a note on stderr.

use std::path::PathBuf;

use anyhow::Context as _;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;

use crate::GlobalArgs;

/// `--device URI`: declared by every command that talks to a device, and by no other
/// (clap refuses it there). Global within a group, so `csx program list --device D`
/// and `csx program --device D list` both work.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DeviceArg {
    /// The device: a state directory (an embedded device), `shm://NAME`,
    /// `tcp://HOST:PORT`, `tcps://HOST:PORT` or `array:DIR`; default: $CSX_DEVICE, else
    /// a per-user device created on first use in ~/.local/share/csx/device.
    #[arg(long, global = true, value_name = "URI")]
    pub device: Option<String>,
}

/// `--device` given before the command (the old place), if it was.
static DEVICE_BEFORE_COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records a `--device` given before the command: used where the command's own
/// `--device` is absent, before `$CSX_DEVICE` (a flag on the command line wins over
/// the environment wherever it stands).
pub fn set_device_before_command(uri: Option<String>) {
    if let Some(uri) = uri {
        let _ = DEVICE_BEFORE_COMMAND.set(uri);
    }
}

impl DeviceArg {
    /// What the command functions take: the device the command line names, else
    /// `$CSX_DEVICE`'s.
    pub fn global(&self) -> GlobalArgs {
        let env = || std::env::var("CSX_DEVICE").ok().filter(|v| !v.is_empty());
        GlobalArgs {
            device: self
                .device
                .clone()
                .or_else(|| DEVICE_BEFORE_COMMAND.get().cloned())
                .or_else(env),
        }
    }
}

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

/// The URI of the device the command line names, without opening or creating it.
pub fn device_uri(global: &GlobalArgs) -> anyhow::Result<String> {
    if let Some(uri) = &global.device {
        return Ok(uri.clone());
    }
    let dir = default_device_dir()?;
    let uri = dir
        .to_str()
        .context("the default device path is not UTF-8")?;
    Ok(uri.to_string())
}

/// The array the command line names, if it names one: `--device array:DIR`, or a
/// `--device DIR` that holds an array (`array.json`).
pub fn array_dir(global: &GlobalArgs) -> Option<PathBuf> {
    match csx_host::DeviceUri::parse(global.device.as_deref()?).ok()? {
        csx_host::DeviceUri::Array(dir) => Some(dir),
        csx_host::DeviceUri::Embedded(dir) => csx_array::desc::is_array(&dir).then_some(dir),
        _ => None,
    }
}

/// Opens the device the command line names (see the module doc).
pub fn open(global: &GlobalArgs) -> anyhow::Result<Device> {
    if let Some(dir) = array_dir(global) {
        anyhow::bail!(
            "{} is an array: this command takes one device (arrays work with put, get, ls, stat, rm, exec, read --lambda, sort)",
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

/// An error and its causes as one line, `what: why: deeper why`, leaving out a cause
/// whose text the line already holds: many error types print their source in their
/// own message and also return it as their source, which would print it twice
/// ("Connection refused (os error 111): Connection refused (os error 111)").
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    let out_of_files = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(rustix::io::Errno::MFILE.raw_os_error()))
    });
    if out_of_files {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let hard = limit
            .maximum
            .map_or_else(|| "unlimited".to_string(), |m| m.to_string());
        line.push_str(&format!(
            " (this process may open {hard} files at most, its hard limit; \
             raise it with `ulimit -Hn N` as root or in /etc/security/limits.conf)"
        ));
    }
    line
}

// Sizes on the command line: one parser and printer for every csx tool.
pub use csx_host::size::{format_size, parse_size};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let io_text = io.to_string();
        let e = anyhow::Error::new(csx_host::TransportError::Io {
            op: "connect to the device",
            source: io,
        })
        .context("cannot open device tcp://127.0.0.1:1");
        let line = error_line(&e);
        assert_eq!(
            line,
            format!("cannot open device tcp://127.0.0.1:1: connect to the device: {io_text}")
        );
        assert_eq!(line.matches(&io_text).count(), 1, "{line}");
        // Distinct causes all stay.
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_line(&e), "outer: middle: inner");
    }

    #[test]
    fn running_out_of_open_files_says_how_to_raise_the_limit() {
        let io = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        let e = anyhow::Error::new(io).context("cannot open array a");
        let line = error_line(&e);
        assert!(line.starts_with("cannot open array a: "), "{line}");
        assert!(
            line.contains("hard limit; raise it with `ulimit -Hn N`"),
            "{line}"
        );
    }
}
