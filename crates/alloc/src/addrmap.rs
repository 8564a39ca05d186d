//! `allocated_blocks`: the blocks handed out, by address.
//!
//! Every malloc inserts one entry and every free removes one, so this map is
//! on the hot path. It only needs `get`, `insert` and `remove` (it is never
//! iterated, so its order cannot leak into behaviour), and the address of a
//! handed-out block is stored in the block itself and does not change while
//! it is handed out. So the table holds block ids only (4 bytes a slot) and
//! reads each id's address from the blocks (`addr_of`), which the caller
//! touches next anyway. Open addressing, linear probing, at most 1/8 full:
//! a lookup is a multiply, a shift and almost always one probe, and a removal
//! almost never has a run to shift back (backward-shift deletion, no
//! tombstones). Faster than `HashMap<u64, u32>` with a multiplicative hasher
//! (`cargo bench -p vramscope-alloc`, `docs/performance.md`).

/// An empty slot (block ids never reach it: it is the allocator's NIL).
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(crate) struct AddrMap {
    /// Block ids, `EMPTY` for a free slot; a power of two long.
    slots: Vec<u32>,
    len: usize,
    /// 64 - log2(slots.len()): a slot is the top bits of a product.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        Self::with_slots(256)
    }
}

impl AddrMap {
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        Self {
            slots: vec![EMPTY; n],
            len: 0,
            shift: 64 - n.trailing_zeros(),
        }
    }

    /// Fibonacci hashing: addresses are 512-byte aligned and share their
    /// high bits; the top bits of the product depend on all of them.
    #[inline]
    fn home(&self, addr: u64) -> usize {
        (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `addr`, or the empty slot ending its run.
    #[inline]
    fn probe(&self, addr: u64, addr_of: impl Fn(u32) -> u64) -> (usize, bool) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(addr);
        loop {
            let id = self.slots[i];
            if id == EMPTY {
                return (i, false);
            }
            if addr_of(id) == addr {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// The block handed out at `addr`.
    #[inline]
    pub(crate) fn get(&self, addr: u64, addr_of: impl Fn(u32) -> u64) -> Option<u32> {
        match self.probe(addr, addr_of) {
            (i, true) => Some(self.slots[i]),
            _ => None,
        }
    }

    /// Record block `id`, whose address is `addr`, replacing any block
    /// recorded at that address.
    #[inline]
    pub(crate) fn insert(&mut self, addr: u64, id: u32, addr_of: impl Fn(u32) -> u64) {
        debug_assert!(id != EMPTY && addr_of(id) == addr);
        if (self.len + 1) * 8 > self.slots.len() {
            self.grow(&addr_of);
        }
        let (i, found) = self.probe(addr, &addr_of);
        if !found {
            self.len += 1;
        }
        self.slots[i] = id;
    }

    /// Forget the block at `addr`, returning it.
    #[inline]
    pub(crate) fn remove(&mut self, addr: u64, addr_of: impl Fn(u32) -> u64) -> Option<u32> {
        let (mut hole, found) = self.probe(addr, &addr_of);
        if !found {
            return None;
        }
        let id = self.slots[hole];
        self.len -= 1;
        // Backward-shift deletion: move back each later entry of the run
        // whose home is not cyclically between the hole and itself.
        let mask = self.slots.len() - 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let other = self.slots[i];
            if other == EMPTY {
                break;
            }
            let home = self.home(addr_of(other));
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.slots[hole] = other;
                hole = i;
            }
        }
        self.slots[hole] = EMPTY;
        Some(id)
    }

    #[cold]
    fn grow(&mut self, addr_of: &impl Fn(u32) -> u64) {
        let old = std::mem::replace(self, Self::with_slots(self.slots.len() * 2));
        for id in old.slots {
            if id != EMPTY {
                let (i, _) = self.probe(addr_of(id), addr_of);
                self.slots[i] = id;
                self.len += 1;
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
        // Block i lives at addrs[i]; few distinct, clustered addresses make
        // long probe runs and many hits.
        let addrs: Vec<u64> = (0..3000u64).map(|i| 0x7f00_0000_0000 + i * 512).collect();
        let addr_of = |id: u32| addrs[id as usize];
        let mut m = AddrMap::default();
        let mut h = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x % 3000) as u32;
            let addr = addrs[id as usize];
            match x >> 62 {
                0 | 1 => {
                    m.insert(addr, id, addr_of);
                    h.insert(addr, id);
                }
                2 => assert_eq!(m.remove(addr, addr_of), h.remove(&addr)),
                _ => assert_eq!(m.get(addr, addr_of), h.get(&addr).copied()),
            }
            assert_eq!(m.len, h.len());
        }
        for (a, id) in h {
            assert_eq!(m.get(a, addr_of), Some(id));
        }
    }
}
