//! Opening devices: URIs, initialisation, and several clients of one embedded device.

use csx_host::transport::inproc::DeviceConfig;
use csx_host::{Device, OpenError};

use crate::Fixture;

#[test]
fn uris_and_errors() {
    let e = Device::open("nvme://x").unwrap_err();
    assert!(matches!(e, OpenError::UnknownScheme { .. }), "{e}");
    // No device serves these: the transport says so.
    for uri in ["shm://csx-nobody-serves-this", "tcp://127.0.0.1:1"] {
        let e = Device::open(uri).unwrap_err();
        assert!(matches!(e, OpenError::Transport(_)), "{uri}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let e = Device::open(dir.path().to_str().unwrap()).unwrap_err();
    assert!(matches!(e, OpenError::Embedded(_)), "{e}");
    assert!(
        e.to_string().contains("csx device init"),
        "the message says what to do: {e}"
    );
    let state = dir.path().join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 1 << 20,
        slm_size_bytes: 1 << 20,
        ..DeviceConfig::default()
    };
    let dev = Device::init(&state, config.clone()).unwrap();
    // Initialising again, whether the device is running here or closed, is refused.
    assert!(Device::init(&state, config.clone()).is_err());
    dev.close().unwrap();
    let e = Device::init(&state, config).unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    let uri = format!("inproc://{}", state.display());
    Device::open(&uri).unwrap().identify().unwrap();
}

/// Two opens of one directory in one process share the running device, each with its
/// own queue pair; the device stops when the last closes.
fn two_clients_one_device(f: &mut Fixture) {
    let second = f.open();
    f.dev().put_bytes("/shared", b"seen by both").unwrap();
    assert_eq!(
        second.read_file("/shared", 0, 100).unwrap(),
        b"seen by both"
    );
    second.close().unwrap();
    f.dev().identify().unwrap();
}

crate::backend_tests!(two_clients_one_device);

/// A CA file (`CSX_TLS_CA`) that cannot be used is named once in the open error, with
/// its cause once: the TLS configuration's error leaves the naming to `OpenError::Io`.
#[test]
fn a_bad_tls_ca_file_is_named_once() {
    use csx_host::transport::tcp::conn::tls::client_config;
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, b"not a certificate\n").unwrap();
    for ca in [dir.path().join("missing.pem"), empty] {
        let e = OpenError::Io {
            op: "read the TLS certificates of CSX_TLS_CA,",
            path: ca.clone(),
            source: client_config(&ca).unwrap_err(),
        }
        .to_string();
        let name = ca.display().to_string();
        assert_eq!(e.matches(&name).count(), 1, "{e}");
    }
}
