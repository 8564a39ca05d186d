//! `allocated_blocks`: the blocks handed out, by address.
//!
//! Every malloc inserts one entry and every free removes one, so this map is
//! on the hot path. It only needs `get`, `insert` and `remove` (it is never
//! iterated, so its order cannot leak into behaviour). An open-addressing
//! table with linear probing over plain (address, id) slots, kept at most
//! half full, does each in a multiply, a shift and usually one probe; deletion
//! shifts the following entries back (no tombstones, so probe runs stay short
//! however long the replay). Measured with `cargo bench -p vramscope-alloc`:
//! faster than `HashMap` with a custom hasher on the training mix.

/// Marks an empty slot (block ids never reach it: it is the allocator's NIL).
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(crate) struct AddrMap {
    /// (address, block id); `EMPTY` id for a free slot. A power of two long.
    slots: Vec<(u64, u32)>,
    len: usize,
    /// 64 - log2(slots.len()): the hash is the top bits of a product.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        Self::with_slots(64)
    }
}

impl AddrMap {
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        Self {
            slots: vec![(0, EMPTY); n],
            len: 0,
            shift: 64 - n.trailing_zeros(),
        }
    }

    /// Fibonacci hashing: addresses are 512-byte aligned and share their high
    /// bits, and the top bits of the product mix them all.
    #[inline]
    fn home(&self, addr: u64) -> usize {
        (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `addr`, if any.
    #[inline]
    fn find(&self, addr: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let (a, id) = self.slots[i];
            if id == EMPTY {
                return None;
            }
            if a == addr {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<u32> {
        self.find(addr).map(|i| self.slots[i].1)
    }

    /// Map `addr` to `id`, replacing any previous entry.
    #[inline]
    pub(crate) fn insert(&mut self, addr: u64, id: u32) {
        debug_assert!(id != EMPTY);
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let (a, old) = self.slots[i];
            if old == EMPTY {
                self.slots[i] = (addr, id);
                self.len += 1;
                return;
            }
            if a == addr {
                self.slots[i].1 = id;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Remove `addr`, returning its id.
    #[inline]
    pub(crate) fn remove(&mut self, addr: u64) -> Option<u32> {
        let mut hole = self.find(addr)?;
        let id = self.slots[hole].1;
        self.len -= 1;
        // Backward-shift deletion: move back each following entry of the run
        // whose home is not between the hole and itself (cyclically).
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let (a, other) = self.slots[i];
            if other == EMPTY {
                break;
            }
            let home = self.home(a);
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[i];
                hole = i;
            }
        }
        self.slots[hole] = (0, EMPTY);
        Some(id)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::with_slots(self.slots.len() * 2));
        for (a, id) in old.slots {
            if id != EMPTY {
                self.insert(a, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AddrMap;
    use std::collections::HashMap;

    #[test]
    fn behaves_as_a_hash_map() {
        let mut m = AddrMap::default();
        let mut h = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct, clustered addresses: long probe runs, many hits.
            let addr = 0x7f00_0000_0000 + (x % 3000) * 512;
            match x >> 62 {
                0 | 1 => {
                    m.insert(addr, step);
                    h.insert(addr, step);
                }
                2 => assert_eq!(m.remove(addr), h.remove(&addr)),
                _ => assert_eq!(m.get(addr), h.get(&addr).copied()),
            }
            assert_eq!(m.len, h.len());
        }
        for (a, id) in h {
            assert_eq!(m.get(a), Some(id));
        }
    }
}
