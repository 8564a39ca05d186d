//! A fast hasher for the hot maps keyed by integers or pointers (device
//! addresses, block ids, autograd nodes): SipHash's DoS resistance buys
//! nothing here. The eager twin's maps use it too.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply by a large odd constant and fold the high half onto the low bits
/// hashbrown indexes by (addresses and pointers share their high bits and
/// are aligned).
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, i: u64) {
        let h = (self.0 ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` with [`IntHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
