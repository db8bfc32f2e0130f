//! The staging yardstick's direct reader on one range of a file, to check it against
//! `fio` over the same bytes:
//! `cargo run --release -p csx-data --example yardstick_beside_fio -- FILE OFFSET LEN`,
//! then `fio --name=y --filename=FILE --readonly --direct=1 --bs=1M --rw=read
//! --offset=OFFSET --size=LEN` (psync, and `--ioengine=libaio --iodepth=4`). Prints each
//! depth's requests, bytes, ms and MiB/s.

use csx_data::ssb::yardstick::{mib_per_s, read_direct, requests, MediaRange, QUEUED_DEPTH};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, file, offset, len] = &args[..] else {
        return Err("usage: yardstick_beside_fio FILE OFFSET LEN".into());
    };
    let (offset, len) = (offset.parse()?, len.parse()?);
    let reqs = requests(&[MediaRange { offset, len }]);
    for depth in [1, QUEUED_DEPTH] {
        let r = read_direct(std::path::Path::new(file), &reqs, depth)?;
        println!(
            "depth {depth}: {} requests, {} bytes, {:.3} ms, {:.0} MiB/s",
            r.requests,
            r.read_bytes,
            r.wall_ns as f64 / 1e6,
            mib_per_s(r.read_bytes, r.wall_ns)
        );
    }
    Ok(())
}
