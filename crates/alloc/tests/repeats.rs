//! A step that frees everything it allocates, made a second time: when
//! `repeats_with_its_segments` says so from the first time's recorded fits,
//! the second takes the same blocks (the same addresses), creates no
//! segment, peaks at the same allocated bytes and ends in the state the
//! first ended in. Random cases from a fixed seed, many settings, sizes
//! often repeated (blocks and segments of one size, whose addresses alone
//! decide between them, are common); the test
//! also fails if the answer is always the same (a check that never says
//! yes, or never says no, proves nothing here).

use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};
use vramscope_alloc::{AllocatorConfig, CachingAllocator, SimDevice, MIB};

/// proptest's deterministic generator: the cases are the same at every run.
struct Rng(TestRng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A size; in a layered case, one of a few sizes (MiB) again and again
    /// (a model's layers), which makes segments of one size, and blocks of
    /// a segment's size, common.
    fn size(&mut self, layers: Option<&[u64]>) -> u64 {
        if let Some(l) = layers {
            return l[self.below(l.len() as u64) as usize] << 20;
        }
        match self.below(4) {
            0 => 1 + self.below(4096),
            1 => 4096 + self.below(1 << 20),
            2 => (1 << 20) + self.below(9 << 20),
            _ => (10 << 20) + self.below(200 << 20),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// malloc of this many bytes
    Malloc(u64),
    /// free the live block at this index (modulo) of the step's own
    Free(usize),
    /// record a use of the live block at this index on stream 1
    UseOnStream(usize),
}

/// What one run of `step` did: each malloc's address (None after an
/// out-of-memory) and the allocated peak.
fn run(a: &mut CachingAllocator, step: &[Op]) -> (Vec<Option<u64>>, i64) {
    a.reset_peak_stats();
    let mut live: Vec<u64> = Vec::new();
    let mut addrs = Vec::new();
    for op in step {
        match *op {
            Op::Malloc(n) => {
                let p = a.malloc(n, 0).ok();
                addrs.push(p);
                live.extend(p);
            }
            Op::Free(i) if !live.is_empty() => {
                let p = live.swap_remove(i % live.len());
                a.free(p).unwrap();
            }
            Op::UseOnStream(i) if !live.is_empty() => {
                a.record_stream(live[i % live.len()], 1).unwrap();
            }
            _ => {}
        }
    }
    for p in live {
        a.free(p).unwrap();
    }
    (addrs, a.stats().allocated_bytes.all().peak)
}

#[test]
fn a_step_said_to_repeat_repeats() {
    let settings = [
        ("", None, true),
        ("roundup_power2_divisions:[64:8,256:4,>:1]", None, true),
        ("", Some(0.5), true),
        // other rules than best fit: never said to repeat
        ("expandable_segments:True", None, false),
        ("max_split_size_mb:64", None, false),
        ("garbage_collection_threshold:0.5", Some(0.5), false),
    ];
    let mut rng = Rng(TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let (mut yes, mut no) = (0, 0);
    for case in 0..3000 {
        let (conf, fraction, best_fit_alone) = settings[case % settings.len()];
        let layered = [
            Some(&[2, 8, 10, 20, 40, 60][..]),
            Some(&[4, 16, 20, 40][..]),
            None,
        ][(case / 6) % 3];
        let dev = SimDevice::new(4096 * MIB, (1024 + rng.below(3072)) * MIB);
        let mut a = CachingAllocator::with_device(AllocatorConfig::parse(conf).unwrap(), dev);
        if let Some(f) = fraction {
            a.set_memory_fraction(f);
        }
        // what stays live across steps (weights), with holes between
        let mut kept = Vec::new();
        for _ in 0..rng.below(30) {
            if let Ok(p) = a.malloc(rng.size(layered), 0) {
                kept.push(p);
            }
        }
        for _ in 0..rng.below(10) {
            if !kept.is_empty() {
                let i = rng.below(kept.len() as u64) as usize;
                a.free(kept.swap_remove(i)).unwrap();
            }
        }
        // a step, made once before recording so that its segments are
        // partly there (as a training step after the first)
        let uses = case % 7 == 0;
        let step: Vec<Op> = (0..1 + rng.below(80))
            .map(|_| match rng.below(if uses { 11 } else { 10 }) {
                0..=5 => Op::Malloc(rng.size(layered)),
                10 => Op::UseOnStream(rng.below(64) as usize),
                _ => Op::Free(rng.below(64) as usize),
            })
            .collect();
        if (case / 18) % 2 == 0 {
            let first: Vec<Op> = step
                .iter()
                .map(|op| match *op {
                    Op::Malloc(n) => Op::Malloc(n + rng.below(3 << 20)),
                    op => op,
                })
                .collect();
            run(&mut a, &first);
        }
        a.record_fits();
        let frees = a.stats().num_device_free;
        let (addrs, peak) = run(&mut a, &step);
        if addrs.iter().any(Option::is_none) {
            // ran out of memory: not a step that completes
            continue;
        }
        let says = a.repeats_with_its_segments(frees);
        if !says {
            no += 1;
            continue;
        }
        yes += 1;
        assert!(best_fit_alone, "case {case}: {conf} said to repeat");
        let (segments, state) = (a.stats().num_device_alloc, a.snapshot());
        let (again, peak_again) = run(&mut a, &step);
        assert_eq!(again, addrs, "case {case}: other blocks taken");
        assert_eq!(peak_again, peak, "case {case}");
        assert_eq!(a.stats().num_device_alloc, segments, "case {case}");
        assert_eq!(a.snapshot(), state, "case {case}");
    }
    // both answers happen, often
    assert!(
        yes >= 100 && no >= 100,
        "said yes {yes} times, no {no} times"
    );
}
