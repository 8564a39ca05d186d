//! Property tests: after every operation, on random workloads and settings,
//! blocks tile their segments exactly, allocated = sum of allocated blocks,
//! reserved = sum of segments, and no statistic is negative.

use proptest::prelude::*;
use vramscope_alloc::{AllocatorConfig, CachingAllocator, SimDevice, MIB};

#[derive(Debug, Clone)]
enum Op {
    Malloc { size: u64, stream: u64 },
    Free(usize),
    RecordStream(usize, u64),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1u64..4096,
        4096u64..(1 << 20),
        (1u64 << 20)..(10 << 20),
        (10u64 << 20)..(300 << 20),
    ];
    prop_oneof![
        6 => (size, 0u64..3).prop_map(|(size, stream)| Op::Malloc { size, stream }),
        5 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 1u64..3).prop_map(|(i, s)| Op::RecordStream(i, s)),
        1 => Just(Op::EmptyCache),
    ]
}

fn config() -> impl Strategy<Value = (String, Option<f64>)> {
    prop_oneof![
        Just(("".to_string(), None)),
        Just(("expandable_segments:True".to_string(), None)),
        Just(("max_split_size_mb:64".to_string(), None)),
        Just((
            "max_split_size_mb:40,max_non_split_rounding_mb:60".to_string(),
            None
        )),
        Just((
            "roundup_power2_divisions:[64:8,256:4,>:1]".to_string(),
            None
        )),
        Just(("garbage_collection_threshold:0.5".to_string(), Some(0.5))),
        Just(("".to_string(), Some(0.3))),
        Just(("expandable_segments:True".to_string(), Some(0.4))),
    ]
}

/// Settings, a GPU's capacity in MiB and the operations of one case.
fn workload() -> impl Strategy<Value = ((String, Option<f64>), u64, Vec<Op>)> {
    (config(), 600u64..3000, prop::collection::vec(op(), 1..300))
}

/// A fresh allocator with the settings `conf`, under `fraction` if any, on
/// a small GPU of `capacity_mib` so that out-of-memory and the retry path
/// happen.
fn allocator(conf: &str, fraction: Option<f64>, capacity_mib: u64) -> CachingAllocator {
    let cfg = AllocatorConfig::parse(conf).unwrap();
    let dev = SimDevice::new(2048 * MIB, capacity_mib * MIB);
    let mut a = CachingAllocator::with_device(cfg, dev);
    if let Some(f) = fraction {
        a.set_memory_fraction(f);
    }
    a
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn invariants_hold_after_every_operation(
        ((conf, fraction), capacity_mib, ops) in workload(),
    ) {
        let mut a = allocator(&conf, fraction, capacity_mib);
        let mut live: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Malloc { size, stream } => {
                    if let Ok(p) = a.malloc(size, stream) {
                        prop_assert!(!live.contains(&p), "address {p:#x} handed out twice");
                        live.push(p);
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let p = live.swap_remove(i % live.len());
                    a.free(p).unwrap();
                }
                Op::RecordStream(i, s) if !live.is_empty() => {
                    a.record_stream(live[i % live.len()], s).unwrap();
                }
                Op::EmptyCache => a.empty_cache(),
                _ => {}
            }
            if let Err(e) = a.check_invariants() {
                return Err(TestCaseError::fail(e));
            }
            let s = a.stats();
            prop_assert!(s.allocated_bytes.all().peak >= s.allocated_bytes.all().current);
            prop_assert!(s.reserved_bytes.all().current >= s.allocated_bytes.all().current);
            // (Expandable segments map whole pages and may pass the limit by
            // less than a page, as PyTorch does.)
            if let (Some(max), false) = (a.allowed_memory_maximum(), a.config().expandable_segments) {
                prop_assert!(a.total_allocated_memory() <= max);
            }
        }
        // Free everything, empty the cache: nothing may stay reserved.
        for p in live.drain(..) {
            a.free(p).unwrap();
        }
        a.empty_cache();
        prop_assert_eq!(a.stats().reserved_bytes.all().current, 0);
        prop_assert_eq!(a.stats().allocated_bytes.all().current, 0);
        prop_assert_eq!(a.stats().inactive_split_bytes.all().current, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// Freeing by handle on an allocator without the address index does
    /// what freeing by address does on one with it: the same addresses, the
    /// same out-of-memory errors, the same statistics and segments. One
    /// that keeps the figures only (`figures_only`) does the same, with the
    /// same statistics of the figures.
    #[test]
    fn handles_without_the_index_free_as_addresses_do(
        ((conf, fraction), capacity_mib, ops) in workload(),
    ) {
        let mut by_addr = allocator(&conf, fraction, capacity_mib);
        let mut by_handle = allocator(&conf, fraction, capacity_mib).without_address_index();
        let mut lean = allocator(&conf, fraction, capacity_mib).figures_only();
        let mut live = Vec::new();
        for op in ops {
            match op {
                Op::Malloc { size, stream } => {
                    let a = by_addr.malloc(size, stream);
                    let h = by_handle.malloc_handle(size, stream);
                    let l = lean.malloc_handle(size, stream);
                    let h_addr = h.as_ref().ok().map(|h| h.addr());
                    prop_assert_eq!(a.as_ref().ok().copied(), h_addr);
                    prop_assert_eq!(&h, &l);
                    prop_assert_eq!(a.is_err(), h.is_err());
                    if let (Ok(a), Ok(h), Ok(l)) = (a, h, l) {
                        live.push((a, h, l));
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let (a, h, l) = live.swap_remove(i % live.len());
                    // the index is gone: an address finds nothing
                    prop_assert!(by_handle.free(a).is_err());
                    by_addr.free(a).unwrap();
                    by_handle.free_handle(h).unwrap();
                    lean.free_handle(l).unwrap();
                    // a handle frees once
                    prop_assert!(by_handle.free_handle(h).is_err());
                }
                Op::EmptyCache => {
                    by_addr.empty_cache();
                    by_handle.empty_cache();
                    lean.empty_cache();
                }
                _ => {}
            }
            for a in [&by_handle, &lean] {
                if let Err(e) = a.check_invariants() {
                    return Err(TestCaseError::fail(e));
                }
            }
            prop_assert_eq!(by_addr.stats(), by_handle.stats());
            let (full, kept) = (by_handle.stats(), lean.stats());
            prop_assert_eq!(full.allocated_bytes, kept.allocated_bytes);
            prop_assert_eq!(full.reserved_bytes, kept.reserved_bytes);
            prop_assert_eq!(full.requested_bytes, kept.requested_bytes);
            prop_assert_eq!(full.segment, kept.segment);
            prop_assert_eq!(full.oversize_allocations, kept.oversize_allocations);
            prop_assert_eq!(full.oversize_segments, kept.oversize_segments);
            prop_assert_eq!(
                (full.num_device_alloc, full.num_device_free, full.num_ooms),
                (kept.num_device_alloc, kept.num_device_free, kept.num_ooms)
            );
            prop_assert_eq!(full.num_alloc_retries, kept.num_alloc_retries);
            prop_assert_eq!(kept.allocation.all().allocated, 0);
        }
        prop_assert_eq!(by_addr.snapshot(), by_handle.snapshot());
        prop_assert_eq!(by_handle.snapshot(), lean.snapshot());
    }
}

/// Apply `ops` (their own live list): each malloc's address or `None`.
fn apply(a: &mut CachingAllocator, ops: &[Op]) -> Vec<Option<u64>> {
    let mut live: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for op in ops {
        match *op {
            Op::Malloc { size, stream } => {
                let p = a.malloc(size, stream).ok();
                out.push(p);
                live.extend(p);
            }
            Op::Free(i) if !live.is_empty() => {
                a.free(live.swap_remove(i % live.len())).unwrap();
            }
            Op::RecordStream(i, s) if !live.is_empty() => {
                a.record_stream(live[i % live.len()], s).unwrap();
            }
            Op::EmptyCache => a.empty_cache(),
            _ => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// `renew` makes an allocator that has served anything behave as a
    /// fresh one with its settings: the same addresses, statistics and
    /// segments for whatever comes next; so does `renew_recycling` with a
    /// recycled device, whose address space kept the buffers of the run
    /// before (chunks, segment lists, the map of a run that freed
    /// segments).
    #[test]
    fn a_renewed_allocator_is_a_fresh_one(
        ((conf, fraction), capacity_mib, before) in workload(),
        after in prop::collection::vec(op(), 1..300),
        recycle in any::<bool>(),
    ) {
        let mut renewed = allocator(&conf, fraction, capacity_mib);
        // (a recording of fits left running, whose buffer renew keeps)
        renewed.record_fits();
        apply(&mut renewed, &before);
        if recycle {
            renewed.renew_recycling(|d| d.recycled(2048 * MIB, capacity_mib * MIB));
        } else {
            renewed.renew(SimDevice::new(2048 * MIB, capacity_mib * MIB));
        }
        if let Some(f) = fraction {
            renewed.set_memory_fraction(f);
        }
        let mut fresh = allocator(&conf, fraction, capacity_mib);
        // neither records until asked, and then both from nothing
        prop_assert!(!renewed.repeats_with_its_segments(0));
        renewed.record_fits();
        fresh.record_fits();
        prop_assert_eq!(apply(&mut renewed, &after), apply(&mut fresh, &after));
        prop_assert_eq!(
            renewed.repeats_with_its_segments(0),
            fresh.repeats_with_its_segments(0)
        );
        prop_assert_eq!(renewed.stats(), fresh.stats());
        prop_assert_eq!(renewed.snapshot(), fresh.snapshot());
        if let Err(e) = renewed.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// An allocator of figures only has no address index, so no block of it is
/// used on another stream (the one case where the active statistics would
/// be kept apart, from the allocation count it does not keep), and
/// `renew` keeps it so.
#[test]
fn an_allocator_of_figures_only_stays_one() {
    let mut a = allocator("", None, 1024).figures_only();
    for round in 0..2 {
        let h = a.malloc_handle(3 * MIB, 0).unwrap();
        assert!(a.record_stream(h.addr(), 1).is_err(), "round {round}");
        assert!(a.record_stream_handle(h, 1).is_err(), "round {round}");
        assert!(a.free(h.addr()).is_err(), "round {round}");
        assert_eq!(a.stats().allocation.all().allocated, 0, "round {round}");
        assert_eq!(a.stats().allocated_bytes.all().current, 3 << 20);
        a.free_handle(h).unwrap();
        a.check_invariants().unwrap();
        a.renew(SimDevice::new(2048 * MIB, 1024 * MIB));
    }
}

/// `recordStream` through a handle, on an allocator without the address
/// index (the eager twin's): freed, the block's allocated bytes leave at
/// once, its requested and active bytes at the next `malloc`
/// (`insert_events`, then `process_events` -> `free_block`).
#[test]
fn a_block_used_on_another_stream_is_released_at_the_next_malloc() {
    let mut a = allocator("", None, 1024).without_address_index();
    let h = a.malloc_handle(4 * MIB, 7).unwrap();
    a.record_stream_handle(h, 0).unwrap();
    a.free_handle(h).unwrap();
    assert_eq!(a.stats().allocated_bytes.all().current, 0);
    assert_eq!(a.stats().requested_bytes.all().current, 4 << 20);
    assert_eq!(a.stats().active_bytes().all().current, 4 << 20);
    let small = a.malloc_handle(512, 0).unwrap();
    assert_eq!(a.stats().requested_bytes.all().current, 512);
    a.free_handle(small).unwrap();
    a.check_invariants().unwrap();
}
