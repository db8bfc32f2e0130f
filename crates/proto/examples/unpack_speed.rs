//! Decoding speed of encoded column blocks (`csx_proto::abi::colblock`), one thread:
//! bit-packed blocks of every common width, a run-length block and a constant one, each
//! decoded whole REPEATS times (checksum included, as `csx_unpack` does).
//!
//! ```text
//! cargo run --release -p csx-proto --example unpack_speed [ROWS] [REPEATS]
//! ```
//!
//! Prints, per block kind: ns a value and MB/s of values written (best repeat).

use std::time::Instant;

use csx_proto::abi::colblock::{
    crc32c, decode_block, BlockHeader, ENC_CONSTANT, ENC_PACKED, ENC_RUNS,
};

/// `values` (offsets from the reference) packed at `bits` each into little-endian words.
fn pack(values: &[u64], bits: u8) -> Vec<u8> {
    let bits = usize::from(bits);
    let mut words = vec![0u64; (values.len() * bits).div_ceil(64)];
    for (i, &v) in values.iter().enumerate() {
        let (k, s) = (i * bits / 64, i * bits % 64);
        words[k] |= v << s;
        if s + bits > 64 {
            words[k + 1] |= v >> (64 - s);
        }
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn header(encoding: u8, width: u8, bits: u8, rows: u32, payload: &[u8]) -> BlockHeader {
    BlockHeader {
        encoding,
        width,
        bits,
        rows,
        payload_len: payload.len() as u32,
        reference: 1000,
        payload_crc: crc32c(payload),
        ..BlockHeader::default()
    }
}

/// A packed block of `rows` pseudo-random offsets of `bits` bits.
fn packed_block(width: u8, bits: u8, rows: u32) -> (BlockHeader, Vec<u8>) {
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let values: Vec<u64> = (0..rows)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & mask
        })
        .collect();
    let payload = pack(&values, bits);
    (header(ENC_PACKED, width, bits, rows, &payload), payload)
}

/// A run-length block: runs of 1 to 64 rows.
fn runs_block(rows: u32) -> (BlockHeader, Vec<u8>) {
    let mut lens = Vec::new();
    let mut left = rows;
    let mut i = 0u32;
    while left > 0 {
        let len = (1 + (i * 37) % 64).min(left);
        lens.push(u64::from(len));
        left -= len;
        i += 1;
    }
    let values: Vec<u64> = (0..lens.len() as u64).map(|r| r % 200).collect();
    let mut payload = pack(&values, 8);
    payload.extend(pack(&lens, 7));
    let mut h = header(ENC_RUNS, 4, 8, rows, &payload);
    h.runs = lens.len() as u32;
    h.run_bits = 7;
    (h, payload)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: u32 = args.next().map_or(1 << 20, |a| a.parse().expect("ROWS"));
    let repeats: usize = args.next().map_or(20, |a| a.parse().expect("REPEATS"));
    let mut cases: Vec<(String, BlockHeader, Vec<u8>)> = Vec::new();
    for (width, bits) in [
        (4u8, 3u8),
        (4, 7),
        (4, 12),
        (4, 17),
        (4, 24),
        (4, 32),
        (8, 20),
        (8, 40),
        (8, 61),
    ] {
        let (h, p) = packed_block(width, bits, rows);
        cases.push((format!("packed w{width} b{bits}"), h, p));
    }
    let (h, p) = runs_block(rows);
    cases.push(("runs w4".to_string(), h, p));
    cases.push((
        "constant w4".to_string(),
        header(ENC_CONSTANT, 4, 0, rows, &[]),
        Vec::new(),
    ));
    println!("rows {rows}, best of {repeats}");
    for (name, h, payload) in &cases {
        let mut out = vec![0u8; rows as usize * usize::from(h.width)];
        let mut best = f64::MAX;
        for _ in 0..repeats {
            let t = Instant::now();
            decode_block(h, payload, 0, &mut out).expect("a good block");
            best = best.min(t.elapsed().as_secs_f64());
        }
        let ns = best * 1e9 / f64::from(rows);
        let mbs = out.len() as f64 / best / 1e6;
        println!("{name:<16} {ns:6.3} ns/value {mbs:9.0} MB/s");
    }
}
