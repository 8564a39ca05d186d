//! `fit_for_a_moment`: where it answers for a nest of mallocs (each with the
//! earlier ones open), the same mallocs hand out the blocks it said (address
//! and bytes) and create no segment, and the frees of their blocks in the
//! reverse order leave every segment and block as it was (but the requested
//! bytes a free block keeps from its last allocation); where it does not,
//! no block fits (the malloc makes a segment). Random states of both pools
//! from a fixed seed; the test also fails if an answer, or a nested one,
//! never comes. And `free_set_changes` changes whenever a pool's free
//! blocks do.

use vramscope_alloc::{AllocatorConfig, CachingAllocator, Handle, Moment, MIB};

use vramscope_testkit::XorShift as Rng;

/// A request: small, large, or the same few sizes again.
fn size(rng: &mut Rng) -> u64 {
    match rng.next() % 5 {
        0 => 1 + rng.next() % (900 << 10),
        1 => 24 * MIB,
        2 => 3 * MIB + 512,
        _ => 1 + rng.next() % (60 * MIB),
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
fn blocks_for_a_moment_leave_the_pool_as_it_was() {
    let (mut some, mut none, mut nested) = (0, 0, 0);
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let mut live: Vec<Handle> = Vec::new();
        for _ in 0..300 {
            let before =
                [false, true].map(|small| (free_blocks(&a, small), a.free_set_changes(small)));
            if live.is_empty() || rng.next() % 100 < 55 {
                live.push(a.malloc_handle(size(&mut rng), 0).unwrap());
            } else {
                let h = live.swap_remove((rng.next() % live.len() as u64) as usize);
                a.free_handle(h).unwrap();
            }
            // (a pool whose free blocks changed says so)
            for (small, (free, changes)) in [false, true].into_iter().zip(before) {
                if free_blocks(&a, small) != free {
                    assert_ne!(a.free_set_changes(small), changes, "seed {seed}");
                }
            }
            // a nest of one to three mallocs, each made for a moment with
            // the earlier ones open, and the same mallocs made on a copy
            let mut b = a.clone();
            let reserved = b.stats().reserved_bytes.all().current;
            let mut open: Vec<Moment> = Vec::new();
            let mut handles = Vec::new();
            for depth in 0..1 + rng.next() % 3 {
                let size = size(&mut rng);
                let said = a.fit_for_a_moment(size, 0, &open);
                let h = b.malloc_handle(size, 0).unwrap();
                handles.push(h);
                let made = b.stats().reserved_bytes.all().current != reserved;
                match said {
                    Some(m) => {
                        some += 1;
                        nested += usize::from(depth > 0);
                        assert!(!made, "seed {seed} depth {depth}");
                        assert_eq!(h.addr(), m.took.1, "seed {seed}");
                        assert_eq!(Some(m.bytes), bytes_of(&b, h), "seed {seed}");
                        open.push(m);
                    }
                    None => {
                        none += 1;
                        assert!(made, "seed {seed}: a block fitted");
                        break;
                    }
                }
            }
            for h in handles.into_iter().rev() {
                b.free_handle(h).unwrap();
            }
            if b.stats().reserved_bytes.all().current == reserved {
                assert_eq!(shape(&a), shape(&b), "seed {seed}");
            }
        }
    }
    assert!(
        some > 100 && none > 100 && nested > 100,
        "{some} answers ({nested} nested), {none} none"
    );
}

/// The free blocks (size, address) of the small pool or the large one.
fn free_blocks(a: &CachingAllocator, small: bool) -> Vec<(u64, u64)> {
    a.snapshot()
        .iter()
        .filter(|s| s.is_large != small)
        .flat_map(|s| &s.blocks)
        .filter(|b| !b.allocated)
        .map(|b| (b.size, b.address))
        .collect()
}

/// The bytes of the block `h` names.
fn bytes_of(a: &CachingAllocator, h: Handle) -> Option<u64> {
    a.snapshot()
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|x| x.allocated && x.address == h.addr())
        .map(|x| x.size)
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
    assert_eq!(a.fit_for_a_moment(30 * MIB, 0, &[]), None);
    let mut a = CachingAllocator::new(AllocatorConfig::default());
    let h = a.malloc_handle(30 * MIB, 0).unwrap();
    a.free_handle(h).unwrap();
    assert_eq!(
        a.fit_for_a_moment(30 * MIB, 0, &[]).map(|m| m.bytes),
        Some(30 * MIB)
    );
}
