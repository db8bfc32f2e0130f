//! CRC32C (Castagnoli): the file store's block checksum and the column blocks' (one
//! implementation for both, in the lowest crate that needs it).
//!
//! Standard parameters (reflected polynomial 0x82F63B78, initial value and final xor
//! 0xFFFFFFFF), so `crc32c(b"123456789") == 0xE3069283`. On x86-64 with SSE4.2 the
//! processor's `crc32` instruction does the work, three blocks interleaved so its 3-cycle
//! latency does not bound the throughput; elsewhere a slicing-by-8 table does it.

const POLY: u32 = 0x82F6_3B78;

/// Eight 256-entry tables: `TABLES[k][b]` is the CRC of byte `b` followed by `k` zeros.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// The CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Continues a CRC32C: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    !update(!crc, data)
}

/// The CRC32C of every `block`-byte chunk of `data` (whose length is a multiple of
/// `block`), into `out` (one per chunk).
pub fn crc32c_chunks(data: &[u8], block: usize, out: &mut [u32]) {
    debug_assert_eq!(data.len(), block * out.len());
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        let mut chunks = data.chunks_exact(block);
        let mut outs = out.chunks_exact_mut(3);
        for o in &mut outs {
            let (a, b, c) = (
                chunks.next().expect("a chunk per sum"),
                chunks.next().expect("a chunk per sum"),
                chunks.next().expect("a chunk per sum"),
            );
            // SAFETY: `hw::update3` only needs SSE4.2, which was detected just above.
            let (x, y, z) = unsafe { hw::update3(!0, a, !0, b, !0, c) };
            o.copy_from_slice(&[!x, !y, !z]);
        }
        for (o, chunk) in outs.into_remainder().iter_mut().zip(chunks) {
            *o = crc32c(chunk);
        }
        return;
    }
    for (o, chunk) in out.iter_mut().zip(data.chunks_exact(block)) {
        *o = crc32c(chunk);
    }
}

/// Inputs from this length on are checksummed as three interleaved streams whose CRCs
/// are then combined ([`shift`]); below it the combining costs more than it saves.
const SPLIT_MIN: usize = 2048;

fn update(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        if data.len() >= SPLIT_MIN {
            let third = data.len() / 3 / 8 * 8;
            let (a, rest) = data.split_at(third);
            let (b, c) = rest.split_at(third);
            // SAFETY: `hw::update3` only needs SSE4.2, which was detected just above.
            let (x, y, z) = unsafe { hw::update3(crc, a, 0, b, 0, c) };
            // The register after a then b then c: x carried over b's bytes, b's own
            // (started from zero), that carried over c's, and c's own.
            return shift(shift(x, b.len()) ^ y, c.len()) ^ z;
        }
        // SAFETY: `hw::update` only needs SSE4.2, which was detected just above.
        return unsafe { hw::update(crc, data) };
    }
    update_table(crc, data)
}

/// `a * b` modulo the polynomial, both reflected (bit 31 is x^0).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `X2N[k]` is x^(2^k) modulo the polynomial, reflected.
static X2N: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = mul_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// The register `crc` carried over `len` zero bytes: `crc * x^(8 * len)` modulo the
/// polynomial, with x^(8 * len) built from the powers x^(2^k) of `len`'s bits.
fn shift(crc: u32, len: usize) -> u32 {
    let mut power = 1u32 << 31; // x^0
    let mut n = len as u64;
    let mut k = 3; // 8 * len: x^(2^3) a byte
    while n != 0 {
        if n & 1 != 0 {
            power = mul_mod(X2N[k], power);
        }
        n >>= 1;
        k += 1;
    }
    mul_mod(power, crc)
}

fn update_table(mut crc: u32, data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ crc;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        crc = TABLES[7][(lo & 0xFF) as usize]
            ^ TABLES[6][((lo >> 8) & 0xFF) as usize]
            ^ TABLES[5][((lo >> 16) & 0xFF) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xFF) as usize]
            ^ TABLES[2][((hi >> 8) & 0xFF) as usize]
            ^ TABLES[1][((hi >> 16) & 0xFF) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(b)) & 0xFF) as usize];
    }
    crc
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};

    fn word(b: &[u8]) -> u64 {
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }

    #[target_feature(enable = "sse4.2")]
    pub fn update(crc: u32, data: &[u8]) -> u32 {
        let mut c = u64::from(crc);
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            c = _mm_crc32_u64(c, word(w));
        }
        let mut c = c as u32;
        for &b in words.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }

    /// Three independent CRCs at once (equal lengths not required).
    #[target_feature(enable = "sse4.2")]
    pub fn update3(ca: u32, a: &[u8], cb: u32, b: &[u8], cc: u32, c: &[u8]) -> (u32, u32, u32) {
        let n = a.len().min(b.len()).min(c.len()) / 8 * 8;
        let (mut x, mut y, mut z) = (u64::from(ca), u64::from(cb), u64::from(cc));
        for ((wa, wb), wc) in a[..n]
            .chunks_exact(8)
            .zip(b[..n].chunks_exact(8))
            .zip(c[..n].chunks_exact(8))
        {
            x = _mm_crc32_u64(x, word(wa));
            y = _mm_crc32_u64(y, word(wb));
            z = _mm_crc32_u64(z, word(wc));
        }
        (
            update(x as u32, &a[n..]),
            update(y as u32, &b[n..]),
            update(z as u32, &c[n..]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(update_table(!0, b"123456789"), !0xE306_9283);
    }

    #[test]
    fn hardware_and_table_agree_on_random_inputs() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let len = (next() % if round % 10 == 0 { 200_000 } else { 5000 }) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let start = !(next() as u32);
            assert_eq!(
                update(start, &data),
                update_table(start, &data),
                "length {len}"
            );
            let cut = if len == 0 { 0 } else { (next() as usize) % len };
            assert_eq!(
                crc32c_append(crc32c(&data[..cut]), &data[cut..]),
                crc32c(&data)
            );
        }
    }

    #[test]
    fn paths_agree() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 7, 8, 9, 63, 4096, 4099, 20_000] {
            let d = &data[..len];
            let table = !update_table(!0, d);
            assert_eq!(crc32c(d), table, "length {len}");
        }
        let blocks = &data[..4096 * 4];
        let mut sums = [0u32; 4];
        crc32c_chunks(blocks, 4096, &mut sums);
        for (i, s) in sums.iter().enumerate() {
            assert_eq!(*s, !update_table(!0, &blocks[i * 4096..(i + 1) * 4096]));
        }
    }
}
