//! Small hashing helpers (std only).

use std::hash::{BuildHasherDefault, Hasher};

/// A cheap hasher for integer keys (one multiply-xorshift round).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = fold(n);
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = fold(u64::from(n));
    }
}

/// `BuildHasher` for [`IdHasher`].
pub(crate) type IdBuild = BuildHasherDefault<IdHasher>;

#[inline]
fn fold(n: u64) -> u64 {
    let m = u128::from(n ^ 0x243f_6a88_85a3_08d3) * 0x9e37_79b9_7f4a_7c15;
    (m as u64) ^ ((m >> 64) as u64)
}

/// SplitMix64 finaliser: a good 64-bit avalanche.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hash a run of 64-bit words (four independent lanes, for ILP).
#[inline]
pub(crate) fn hash_words(seed: u64, mut words: impl Iterator<Item = u64>) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut h = [seed, seed ^ 0x1111, seed ^ 0x2222, seed ^ 0x3333];
    let mut n = 0u64;
    'outer: loop {
        for lane in &mut h {
            let Some(w) = words.next() else {
                break 'outer;
            };
            *lane = step(*lane, w);
            n += 1;
        }
    }
    mix(h[0] ^ h[1].rotate_left(16) ^ h[2].rotate_left(32) ^ h[3].rotate_left(48) ^ n)
}

/// Hash bytes (not DoS-hardened beyond the random seed; callers compare
/// contents on collision).
pub(crate) fn hash_bytes(seed: u64, b: &[u8]) -> u64 {
    let mut h = seed ^ (b.len() as u64);
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(a))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    for &x in chunks.remainder() {
        h = (h ^ u64::from(x))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    mix(h)
}

/// A random seed for this process (from std's randomly keyed SipHash).
pub(crate) fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}
