//! A flipped bit on the media: every transport (embedded, shm, tcp) and `get_file`
//! report a checksum error naming the file and the block, and never return other bytes.
//!
//! Method: a file is put and the device closed; one bit of the image at the file's
//! second block is flipped behind the device's back; then the file is read through
//! each transport.

use std::os::unix::fs::FileExt;

use csx_host::proto::Status;
use csx_host::Device;

use crate::durability::{fresh_device, Daemon};
use crate::served::Kind;
use csx_testkit::bytes::seeded;

#[test]
fn a_flipped_bit_is_an_error_naming_file_and_block_on_every_transport() {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let data = seeded(3 << 20, 31);
    let nvm_offset = {
        let dev = Device::open(state.to_str().unwrap()).unwrap();
        dev.put_bytes("/m/file", &data).unwrap();
        let ext = dev.extents("/m/file").unwrap();
        dev.close().unwrap();
        ext.extents[0].nvm_offset
    };
    let image = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(state.join("nvm.img"))
        .unwrap();
    let at = nvm_offset + 4096 + 77;
    let mut b = [0u8];
    image.read_exact_at(&mut b, at).unwrap();
    image.write_all_at(&[b[0] ^ 0x20], at).unwrap();
    image.sync_all().unwrap();

    let check = |dev: &Device, how: &str| {
        let err = dev.read_file("/m/file", 0, u64::MAX).unwrap_err();
        assert_eq!(err.status(), Some(Status::Corrupt), "{how}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("/m/file") && text.contains("block 1") && text.contains("checksum"),
            "{how}: {text}"
        );
        // A read that avoids the block is served.
        assert_eq!(
            dev.read_file("/m/file", 2 << 20, 100).unwrap(),
            data[2 << 20..(2 << 20) + 100],
            "{how}"
        );
        // get_file fails and leaves no local file.
        let local = dir.path().join(format!("got-{how}"));
        assert!(
            dev.get_file("/m/file", &local, &mut |_| {}).is_err(),
            "{how}"
        );
        assert!(!local.exists(), "{how}: a partial local file");
    };
    let dev = Device::open(state.to_str().unwrap()).unwrap();
    check(&dev, "embedded");
    dev.close().unwrap();
    for kind in [Kind::Shm, Kind::Tcp] {
        let daemon = Daemon::start(&state, kind);
        let dev = Device::open(&daemon.uri).unwrap();
        check(&dev, &format!("{kind:?}"));
        dev.close().unwrap();
        daemon.kill();
    }
}
