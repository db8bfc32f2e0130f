//! Device URIs: which transport reaches a device, and where.
//!
//! | URI                         | device                                         |
//! |-----------------------------|------------------------------------------------|
//! | `PATH`, `inproc://PATH`     | embedded: the state directory, opened in-process |
//! | `shm://NAME`                | a `csx device serve` on this machine           |
//! | `tcp://HOST:PORT`           | a `csx device serve` across the network         |
//! | `tcps://HOST:PORT`          | the same over TLS (trusting the CAs in the PEM file named by `CSX_TLS_CA`) |
//! | `array:DIR`, `array://DIR`  | an array of devices described in `DIR` (opened by `csx_array::open`) |
//!
//! A string without `://` (and not starting `array:`) is a path, so `./dev`,
//! `/var/lib/csx` and `dev0` all name embedded devices.
//!
//! This crate parses `array:` but cannot open it: arrays live in csx-array, above this
//! crate. [`crate::Device::open`] refuses an array with [`OpenError::Array`]; products
//! open every form through `csx_array::open`.

use std::fmt;
use std::path::PathBuf;

use crate::error::OpenError;

/// A parsed device URI.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceUri {
    /// An embedded device in this state directory.
    Embedded(PathBuf),
    /// A device served over shared memory under this name.
    Shm { name: String },
    /// A device served over TCP at `HOST:PORT`.
    Tcp { addr: String },
    /// A device served over TLS on TCP at `HOST:PORT`.
    Tcps { addr: String },
    /// An array of devices described in this directory.
    Array(PathBuf),
}

/// The schemes [`DeviceUri::parse`] knows, as an unknown scheme's error lists them.
pub const SCHEMES: &str =
    "a path or inproc://PATH, shm://NAME, tcp://HOST:PORT, tcps://HOST:PORT, array:DIR";

impl DeviceUri {
    /// Parses `uri` (see the module doc).
    pub fn parse(uri: &str) -> Result<DeviceUri, OpenError> {
        let bad = |reason| OpenError::BadUri {
            uri: uri.to_string(),
            reason,
        };
        if uri.is_empty() {
            return Err(bad("is empty"));
        }
        if let Some(dir) = uri.strip_prefix("array:") {
            let dir = dir.strip_prefix("//").unwrap_or(dir);
            if dir.is_empty() {
                return Err(bad("names no directory after array:"));
            }
            return Ok(DeviceUri::Array(PathBuf::from(dir)));
        }
        let Some((scheme, rest)) = uri.split_once("://") else {
            return Ok(DeviceUri::Embedded(PathBuf::from(uri)));
        };
        let is_scheme = !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !is_scheme {
            return Ok(DeviceUri::Embedded(PathBuf::from(uri)));
        }
        if rest.is_empty() {
            return Err(bad("names no device after the scheme"));
        }
        match scheme.to_ascii_lowercase().as_str() {
            "inproc" | "file" => Ok(DeviceUri::Embedded(PathBuf::from(rest))),
            "shm" => Ok(DeviceUri::Shm {
                name: rest.to_string(),
            }),
            "tcp" => {
                if !rest.contains(':') {
                    return Err(bad("tcp needs HOST:PORT"));
                }
                Ok(DeviceUri::Tcp {
                    addr: rest.to_string(),
                })
            }
            "tcps" => {
                if !rest.contains(':') {
                    return Err(bad("tcps needs HOST:PORT"));
                }
                Ok(DeviceUri::Tcps {
                    addr: rest.to_string(),
                })
            }
            _ => Err(OpenError::UnknownScheme {
                uri: uri.to_string(),
                scheme: scheme.to_string(),
            }),
        }
    }

    /// The transport's name: `inproc`, `shm`, `tcp`, `tcps` or `array`.
    pub fn transport(&self) -> &'static str {
        match self {
            DeviceUri::Array(_) => "array",
            DeviceUri::Embedded(_) => "inproc",
            DeviceUri::Shm { .. } => "shm",
            DeviceUri::Tcp { .. } => "tcp",
            DeviceUri::Tcps { .. } => "tcps",
        }
    }
}

impl fmt::Display for DeviceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceUri::Embedded(p) => write!(f, "{}", p.display()),
            DeviceUri::Shm { name } => write!(f, "shm://{name}"),
            DeviceUri::Tcp { addr } => write!(f, "tcp://{addr}"),
            DeviceUri::Tcps { addr } => write!(f, "tcps://{addr}"),
            DeviceUri::Array(dir) => write!(f, "array:{}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            DeviceUri::parse("dev0").unwrap(),
            DeviceUri::Embedded("dev0".into())
        );
        assert_eq!(
            DeviceUri::parse("/a/b").unwrap(),
            DeviceUri::Embedded("/a/b".into())
        );
        assert_eq!(
            DeviceUri::parse("inproc:///a").unwrap(),
            DeviceUri::Embedded("/a".into())
        );
        assert_eq!(
            DeviceUri::parse("shm://dev0").unwrap(),
            DeviceUri::Shm {
                name: "dev0".into()
            }
        );
        assert_eq!(
            DeviceUri::parse("tcp://127.0.0.1:7000").unwrap(),
            DeviceUri::Tcp {
                addr: "127.0.0.1:7000".into()
            }
        );
        assert_eq!(
            DeviceUri::parse("tcps://localhost:7000").unwrap(),
            DeviceUri::Tcps {
                addr: "localhost:7000".into()
            }
        );
        assert_eq!(
            DeviceUri::parse("tcps://localhost:7000")
                .unwrap()
                .to_string(),
            "tcps://localhost:7000"
        );
        assert!(matches!(
            DeviceUri::parse("tcps://host"),
            Err(OpenError::BadUri { .. })
        ));
        assert!(matches!(
            DeviceUri::parse("nvme://x"),
            Err(OpenError::UnknownScheme { .. })
        ));
        assert!(matches!(
            DeviceUri::parse("tcp://host"),
            Err(OpenError::BadUri { .. })
        ));
        assert!(matches!(
            DeviceUri::parse(""),
            Err(OpenError::BadUri { .. })
        ));
        assert!(matches!(
            DeviceUri::parse("shm://"),
            Err(OpenError::BadUri { .. })
        ));
        for uri in ["array:/a/b", "array:///a/b"] {
            assert_eq!(
                DeviceUri::parse(uri).unwrap(),
                DeviceUri::Array("/a/b".into())
            );
        }
        assert_eq!(DeviceUri::parse("array:d").unwrap().to_string(), "array:d");
        assert!(matches!(
            DeviceUri::parse("array:"),
            Err(OpenError::BadUri { .. })
        ));
        // An unknown scheme's error lists the known ones.
        let e = DeviceUri::parse("nvme://x").unwrap_err().to_string();
        for scheme in ["shm://", "tcp://", "tcps://", "array:"] {
            assert!(e.contains(scheme), "{e}");
        }
        // Not a scheme: a path that happens to contain "://".
        assert_eq!(
            DeviceUri::parse("./a://b").unwrap(),
            DeviceUri::Embedded("./a://b".into())
        );
    }
}
