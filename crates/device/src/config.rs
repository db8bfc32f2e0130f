//! The device's configuration, fixed at initialisation and kept in `device.json` in the
//! state directory.
//!
//! Sizes are chosen at `init` and never change (the NVM image and the shared state file
//! have them); `engines` and `transfer_workers` may be absent, meaning "decide at open"
//! (one engine per core). Fields added later get serde defaults, so older files keep
//! opening (a missing `perf` is the unthrottled model).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use csx_proto::limits::{
    ENGINES_MAX, NVM_SIZE_MAX, SLM_SIZE_MAX, STATE_SIZE_MAX, TIME_LIMIT_MS_MAX,
};

use crate::nvm::MediaReads;
use crate::perf::{PerfError, PerfModel};
use crate::state::write_atomic;

/// File name of the configuration in the state directory.
pub const CONFIG_FILE_NAME: &str = "device.json";

/// Version of the state directory's layout.
pub const FORMAT_VERSION: u32 = 1;

/// Block size of the NVM namespace; its size must be a multiple.
pub const NVM_BLOCK_SIZE: u64 = crate::nvm::BLOCK_SIZE;

/// Transfer workers (DMA and copy threads) a device may run.
pub const TRANSFER_WORKERS_MAX: u32 = 64;

/// The time limit of an execution that names none, when `device.json` sets none: an
/// untrusted program holds an engine for at most a second.
pub const TIME_LIMIT_MS_DEFAULT: u32 = 1000;

/// Why a configuration is invalid or unreadable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{field} is {value}, must be between {min} and {max}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("nvm size {value} is not a multiple of the {NVM_BLOCK_SIZE}-byte block")]
    NvmSizeNotBlockMultiple { value: u64 },
    #[error("state directory format {found}, this device reads {FORMAT_VERSION}")]
    Format { found: u32 },
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("{} is not a valid device configuration: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("performance model: {0}")]
    Perf(#[from] PerfError),
}

/// Everything `csx device init` decides.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceConfig {
    /// Layout version of the state directory.
    pub format_version: u32,
    /// Bytes of the NVM namespace (the image file, sparse).
    pub nvm_size_bytes: u64,
    /// Bytes of the memory namespace (SLM).
    pub slm_size_bytes: u64,
    /// Bytes of the shared state region.
    pub state_size_bytes: u64,
    /// Execution engines; `None`: one per core at open.
    #[serde(default)]
    pub engines: Option<u32>,
    /// Transfer (DMA/copy) workers; `None`: 1.
    #[serde(default)]
    pub transfer_workers: Option<u32>,
    /// Whether activation may use the JIT (`None`: yes).
    #[serde(default)]
    pub jit: Option<bool>,
    /// Whether a JIT activation is tiered (`None`: yes): the program runs at once on the
    /// quick tier's code (x86-64 hosts) and moves to Cranelift's when a background compile
    /// lands. `false`: activation waits for Cranelift (steadier timings for benchmarks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit_tiering: Option<bool>,
    /// The emulated device's link, media and compute speeds (absent: unthrottled).
    #[serde(default)]
    pub perf: PerfModel,
    /// Bytes of resident memory: device memory besides the SLM in which Memory Copies
    /// of resident file ranges stay between commands and clients (`crate::resident`);
    /// `None` or 0: none is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_bytes: Option<u64>,
    /// Time limit in milliseconds of an execution that names none; `None`:
    /// [`TIME_LIMIT_MS_DEFAULT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_ms: Option<u32>,
    /// How the device reads its media (`"direct"` or `"cached"`); `None`:
    /// [`MediaReads::Direct`], the device's own media, never the host's page cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_reads: Option<MediaReads>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            format_version: FORMAT_VERSION,
            nvm_size_bytes: 1 << 30,
            slm_size_bytes: 1 << 30,
            state_size_bytes: 1 << 20,
            engines: None,
            transfer_workers: None,
            jit: None,
            jit_tiering: None,
            perf: PerfModel::default(),
            resident_bytes: None,
            time_limit_ms: None,
            media_reads: None,
        }
    }
}

fn range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::OutOfRange {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

impl DeviceConfig {
    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.format_version != FORMAT_VERSION {
            return Err(ConfigError::Format {
                found: self.format_version,
            });
        }
        range(
            "nvm_size_bytes",
            self.nvm_size_bytes,
            NVM_BLOCK_SIZE,
            NVM_SIZE_MAX,
        )?;
        if !self.nvm_size_bytes.is_multiple_of(NVM_BLOCK_SIZE) {
            return Err(ConfigError::NvmSizeNotBlockMultiple {
                value: self.nvm_size_bytes,
            });
        }
        range("slm_size_bytes", self.slm_size_bytes, 4096, SLM_SIZE_MAX)?;
        range("state_size_bytes", self.state_size_bytes, 8, STATE_SIZE_MAX)?;
        if let Some(n) = self.engines {
            range("engines", u64::from(n), 1, u64::from(ENGINES_MAX))?;
        }
        if let Some(n) = self.transfer_workers {
            range(
                "transfer_workers",
                u64::from(n),
                1,
                u64::from(TRANSFER_WORKERS_MAX),
            )?;
        }
        if let Some(n) = self.resident_bytes {
            range("resident_bytes", n, 0, SLM_SIZE_MAX)?;
        }
        if let Some(ms) = self.time_limit_ms {
            range(
                "time_limit_ms",
                u64::from(ms),
                1,
                u64::from(TIME_LIMIT_MS_MAX),
            )?;
        }
        self.perf.validate()?;
        Ok(())
    }

    /// The time limit of an execution that names none, in milliseconds.
    pub fn time_limit_ms_effective(&self) -> u32 {
        self.time_limit_ms.unwrap_or(TIME_LIMIT_MS_DEFAULT)
    }

    /// Adopts `perf` and, unless engines were chosen explicitly, its engine count (the
    /// emulated device's cores).
    pub fn set_perf(&mut self, perf: PerfModel) {
        if self.engines.is_none() {
            self.engines = perf.engines;
        }
        self.perf = perf;
    }

    /// Adopts the named performance profile (see [`PerfModel::profile`]).
    pub fn set_profile(&mut self, name: &str) -> Result<(), PerfError> {
        self.set_perf(PerfModel::profile(name)?);
        Ok(())
    }

    /// Engines to start: the configured number, or one per core.
    pub fn engines_effective(&self) -> u32 {
        self.engines.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get() as u32)
                .min(ENGINES_MAX)
        })
    }

    /// Transfer workers to start.
    pub fn transfer_workers_effective(&self) -> u32 {
        self.transfer_workers.unwrap_or(1)
    }

    /// Reads and validates `device.json` in `dir`.
    pub fn load(dir: &Path) -> Result<DeviceConfig, ConfigError> {
        let path = dir.join(CONFIG_FILE_NAME);
        let bytes = fs::read(&path).map_err(|source| ConfigError::Io {
            path: path.clone(),
            op: "read",
            source,
        })?;
        let config: DeviceConfig =
            serde_json::from_slice(&bytes).map_err(|e| ConfigError::Parse {
                path,
                message: e.to_string(),
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Validates and writes `device.json` in `dir` atomically.
    pub fn save(&self, dir: &Path) -> Result<(), ConfigError> {
        self.validate()?;
        let path = dir.join(CONFIG_FILE_NAME);
        let mut bytes = serde_json::to_vec_pretty(self).expect("a config always serializes");
        bytes.push(b'\n');
        write_atomic(&path, &bytes).map_err(|e| ConfigError::Io {
            path,
            op: "write",
            source: io::Error::other(e.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let c = DeviceConfig {
            engines: Some(3),
            ..DeviceConfig::default()
        };
        c.save(dir.path()).unwrap();
        assert_eq!(DeviceConfig::load(dir.path()).unwrap(), c);
        assert_eq!(c.engines_effective(), 3);
        let bad = DeviceConfig {
            nvm_size_bytes: 4097,
            ..DeviceConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::NvmSizeNotBlockMultiple { .. })
        ));
        let bad = DeviceConfig {
            engines: Some(0),
            ..DeviceConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::OutOfRange {
                field: "engines",
                ..
            })
        ));
        assert_eq!(c.time_limit_ms_effective(), TIME_LIMIT_MS_DEFAULT);
        let bad = DeviceConfig {
            time_limit_ms: Some(TIME_LIMIT_MS_MAX + 1),
            ..DeviceConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            format!(
                "time_limit_ms is {}, must be between 1 and {TIME_LIMIT_MS_MAX}",
                TIME_LIMIT_MS_MAX + 1
            )
        );
        fs::write(dir.path().join(CONFIG_FILE_NAME), b"{").unwrap();
        assert!(matches!(
            DeviceConfig::load(dir.path()),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn media_reads_round_trip_and_default_to_direct() {
        let dir = tempfile::tempdir().unwrap();
        let c = DeviceConfig {
            media_reads: Some(MediaReads::Cached),
            ..DeviceConfig::default()
        };
        c.save(dir.path()).unwrap();
        let text = fs::read_to_string(dir.path().join(CONFIG_FILE_NAME)).unwrap();
        assert!(text.contains("\"media_reads\": \"cached\""), "{text}");
        assert_eq!(DeviceConfig::load(dir.path()).unwrap(), c);
        // A file from before the setting: direct.
        DeviceConfig::default().save(dir.path()).unwrap();
        let text = fs::read_to_string(dir.path().join(CONFIG_FILE_NAME)).unwrap();
        assert!(!text.contains("media_reads"), "{text}");
        let old = DeviceConfig::load(dir.path()).unwrap();
        assert_eq!(old.media_reads.unwrap_or_default(), MediaReads::Direct);
        let bad = text.replacen('{', "{\"media_reads\": \"mmap\",", 1);
        fs::write(dir.path().join(CONFIG_FILE_NAME), bad).unwrap();
        assert!(matches!(
            DeviceConfig::load(dir.path()),
            Err(ConfigError::Parse { .. })
        ));
        assert_eq!("cached".parse::<MediaReads>(), Ok(MediaReads::Cached));
        assert!("Direct"
            .parse::<MediaReads>()
            .unwrap_err()
            .contains("direct or cached"));
    }
}
