//! `fit_for_a_moment`: where it answers, a malloc of that size followed at
//! once by the free of its block hands out a block of the bytes it said,
//! creates no segment and leaves every segment and block as it was (but the
//! requested bytes a free block keeps from its last allocation); where
//! it does not, the block it would miss is not in the pool (the malloc makes
//! a segment). Random states of both pools from a fixed seed; the test also
//! fails if either answer never comes.

use vramscope_alloc::{AllocatorConfig, CachingAllocator, Handle, MIB};

/// A pseudo-random sequence (xorshift), the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A request: small, large, or the same few sizes again.
    fn size(&mut self) -> u64 {
        match self.next() % 5 {
            0 => 1 + self.next() % (900 << 10),
            1 => 24 * MIB,
            2 => 3 * MIB + 512,
            _ => 1 + self.next() % (60 * MIB),
        }
    }
}

/// The segments and blocks, without the requested bytes a free block keeps
/// from its last allocation (they decide nothing).
fn shape(a: &CachingAllocator) -> Vec<vramscope_alloc::SegmentInfo> {
    let mut s = a.snapshot();
    for b in s.iter_mut().flat_map(|g| &mut g.blocks) {
        if !b.allocated {
            b.requested_size = 0;
        }
    }
    s
}

#[test]
fn a_block_for_a_moment_leaves_the_pool_as_it_was() {
    let (mut some, mut none) = (0, 0);
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let mut live: Vec<Handle> = Vec::new();
        for _ in 0..300 {
            if live.is_empty() || rng.next() % 100 < 55 {
                live.push(a.malloc_handle(rng.size(), 0).unwrap());
            } else {
                let h = live.swap_remove((rng.next() % live.len() as u64) as usize);
                a.free_handle(h).unwrap();
            }
            let size = rng.size();
            let said = a.fit_for_a_moment(size, 0);
            let mut b = a.clone();
            let reserved = b.stats().reserved_bytes.all().current;
            let h = b.malloc_handle(size, 0).unwrap();
            let bytes = b
                .snapshot()
                .iter()
                .flat_map(|s| &s.blocks)
                .find(|x| x.allocated && x.address == h.addr())
                .map(|x| x.size);
            let made = b.stats().reserved_bytes.all().current != reserved;
            b.free_handle(h).unwrap();
            match said {
                Some(n) => {
                    some += 1;
                    assert_eq!(Some(n), bytes, "seed {seed}");
                    assert!(!made, "seed {seed}");
                    assert_eq!(shape(&a), shape(&b), "seed {seed}");
                }
                None => {
                    none += 1;
                    assert!(made, "seed {seed}: a block fitted");
                }
            }
        }
    }
    assert!(some > 100 && none > 100, "{some} answers, {none} none");
}

#[test]
fn no_moment_under_rules_that_look_further() {
    let c = AllocatorConfig {
        max_split_size: 40 * MIB,
        ..AllocatorConfig::default()
    };
    let mut a = CachingAllocator::new(c);
    let h = a.malloc_handle(30 * MIB, 0).unwrap();
    a.free_handle(h).unwrap();
    assert_eq!(a.fit_for_a_moment(30 * MIB, 0), None);
    let mut a = CachingAllocator::new(AllocatorConfig::default());
    let h = a.malloc_handle(30 * MIB, 0).unwrap();
    a.free_handle(h).unwrap();
    assert_eq!(a.fit_for_a_moment(30 * MIB, 0), Some(30 * MIB));
}
