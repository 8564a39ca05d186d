//! Speed of the allocator twin on a realistic mix: `cargo bench -p vramscope-alloc`.
//!
//! The mix is that of a training step: many tensors of a few recurring sizes
//! (activations, gradients), small temporaries, and the occasional odd size;
//! about 2/3 of operations hit the cache. Prints malloc/free operations per
//! second on one core.

use std::hint::black_box;
use std::time::Instant;

use vramscope_alloc::{AllocatorConfig, CachingAllocator};

use vramscope_testkit::XorShift as Rng;

enum Op {
    Malloc(u64),
    Free(usize),
}

fn workload(n: usize) -> Vec<Op> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    // Recurring tensor sizes of a transformer layer (bytes), plus small ones.
    let sizes: [u64; 8] = [
        4 << 20,
        16 << 20,
        64 << 20,
        2 << 20,
        32 << 10,
        4096,
        512 << 10,
        12 << 20,
    ];
    let mut live = 0usize;
    let mut ops = Vec::with_capacity(n);
    while ops.len() < n {
        if live > 0 && (live >= 256 || r.next() % 100 < 48) {
            ops.push(Op::Free((r.next() as usize) % live));
            live -= 1;
        } else {
            let s = if r.next().is_multiple_of(10) {
                1 + r.next() % (40 << 20)
            } else {
                sizes[(r.next() % sizes.len() as u64) as usize]
            };
            ops.push(Op::Malloc(s));
            live += 1;
        }
    }
    ops
}

fn run(config: &str, ops: &[Op]) -> f64 {
    let mut a = CachingAllocator::new(AllocatorConfig::parse(config).unwrap());
    let mut live: Vec<u64> = Vec::with_capacity(512);
    let t = Instant::now();
    for op in ops {
        match *op {
            Op::Malloc(s) => live.push(a.malloc(s, 0).unwrap()),
            Op::Free(i) => {
                let p = live.swap_remove(i);
                a.free(p).unwrap();
            }
        }
    }
    black_box(a.stats());
    if std::env::var("BENCH_DEBUG").is_ok() {
        eprintln!(
            "free blocks {:?} segments {} reserved {} MiB inactive_split {}",
            a.free_block_counts(),
            a.stats().segment.all().current,
            a.stats().reserved_bytes.all().current >> 20,
            a.stats().inactive_split.all().current
        );
    }
    ops.len() as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let n: usize = std::env::var("BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000_000);
    let ops = workload(n);
    for config in ["", "expandable_segments:True", "max_split_size_mb:128"] {
        // Warm up, then take the best of three.
        run(config, &ops[..n / 10]);
        let best = (0..3).map(|_| run(config, &ops)).fold(0.0, f64::max);
        println!(
            "allocator twin [{:<26}] {n} malloc/free ops: {:.1} M ops/s",
            if config.is_empty() { "default" } else { config },
            best / 1e6
        );
    }
}
