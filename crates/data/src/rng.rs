//! The generators' random numbers: one independent stream per (seed, table, column),
//! so a column's values never depend on which other columns are generated or in what
//! order, and the same seed gives the same bytes on every machine and every version.
//!
//! The stream is splitmix64 (Steele, Lea and Flood): a 64-bit counter through a
//! mixing function. Uniform integers in [lo, hi] take the high half of a 128-bit
//! product, whose bias (under 2^-40 for the ranges used here) does not matter for test
//! data.

/// One stream.
#[derive(Clone, Debug)]
pub struct Stream {
    state: u64,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of a name, to turn a column name into a stream number.
fn name_hash(name: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Stream {
    /// The stream of column `name` under `seed`.
    pub fn new(seed: u64, name: &str) -> Stream {
        Stream {
            state: mix(seed ^ mix(name_hash(name))),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// Uniform in `[lo, hi]` (inclusive).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        let span = (hi - lo) as u64 + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as i64
    }

    /// One element of `list`, uniformly.
    pub fn pick<T: Copy>(&mut self, list: &[T]) -> T {
        list[self.range(0, list.len() as i64 - 1) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_deterministic_and_independent() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut s = Stream::new(1, "x");
                move |_| s.next_u64()
            })
            .collect();
        let mut s = Stream::new(1, "x");
        assert_eq!(a, (0..4).map(|_| s.next_u64()).collect::<Vec<_>>());
        let mut t = Stream::new(1, "y");
        assert_ne!(a[0], t.next_u64());
        let mut u = Stream::new(2, "x");
        assert_ne!(a[0], u.next_u64());
    }

    #[test]
    fn ranges_cover_both_ends_and_nothing_else() {
        let mut s = Stream::new(7, "r");
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            let v = s.range(3, 7);
            assert!((3..=7).contains(&v));
            seen[(v - 3) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 1800), "{seen:?}");
    }
}
