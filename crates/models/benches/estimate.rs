//! How fast an estimate runs (issue #5: a training step of a Llama-3.1-70B
//! sized config, 80 layers, batch 1, seq 4096, in at most 50 ms for the whole
//! process; issue #6: at least 1,000 estimates per second of a 7B-class
//! config for sweeps; issue #32: a generate estimate of Llama-3.1-70B at
//! batch 8, prompt 4,096 and 4,096 new tokens in at most 100 ms).
//!
//! `cargo bench -p vramscope-models` (BENCH_RUNS=N to change the repetitions).
//! Each figure is the median and the minimum of N single-threaded runs of
//! `estimate()` in this process (the whole-process time, start-up included,
//! is measured by `validation/bench_estimate.sh`).

use std::time::Instant;

use vramscope_engine::DType;
use vramscope_models::{estimate, presets, EstimateOptions, Task, Workload};

fn time(label: &str, runs: usize, mut f: impl FnMut() -> u64) {
    let mut t = Vec::with_capacity(runs);
    let mut ops = 0;
    for _ in 0..runs {
        let s = Instant::now();
        ops = f();
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(|a, b| a.total_cmp(b));
    let med = t[t.len() / 2];
    println!(
        "{label:<58} median {:>8.2} ms  min {:>8.2} ms  ({:.0} estimates/s, {} ops, {:.2} M ops/s)",
        med * 1e3,
        t[0] * 1e3,
        1.0 / med,
        ops,
        ops as f64 / med / 1e6
    );
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let unlimited = EstimateOptions {
        unlimited: true,
        ..EstimateOptions::default()
    };
    let cases: [(&str, &str, Workload); 6] = [
        (
            "llama-3.1-70b train fp32 AdamW b1 s4096 (3 steps)",
            "llama-3.1-70b",
            Workload::train(Task::Causal, 1, 4096),
        ),
        (
            "llama-3.1-70b train bf16 AdamW b1 s4096 (3 steps)",
            "llama-3.1-70b",
            Workload {
                weights: DType::BF16,
                ..Workload::train(Task::Causal, 1, 4096)
            },
        ),
        (
            "llama-3.1-8b train bf16 AdamW b4 s2048 (3 steps)",
            "llama-3.1-8b",
            Workload {
                weights: DType::BF16,
                ..Workload::train(Task::Causal, 4, 2048)
            },
        ),
        (
            "llama-3.1-8b infer bf16 b8 s2048 (2 passes)",
            "llama-3.1-8b",
            Workload {
                weights: DType::BF16,
                ..Workload::infer(Task::Causal, 8, 2048)
            },
        ),
        // issue #32: at most 100 ms for the whole process
        (
            "llama-3.1-70b generate bf16 b8 s4096 +4096 tokens",
            "llama-3.1-70b",
            Workload {
                weights: DType::BF16,
                ..Workload::generate(Task::Causal, 8, 4096, 4096)
            },
        ),
        (
            "llama-3.1-70b generate bf16 b8 s4096 +4096 tokens static",
            "llama-3.1-70b",
            Workload {
                weights: DType::BF16,
                cache: vramscope_models::CacheKind::Static,
                ..Workload::generate(Task::Causal, 8, 4096, 4096)
            },
        ),
    ];
    for (label, preset, w) in cases {
        let config = presets::get(preset).expect("preset");
        if let Err(e) = estimate(&config, &w, &unlimited) {
            println!("{label:<58} not available: {e}");
            continue;
        }
        time(label, runs, || {
            estimate(&config, &w, &unlimited)
                .map(|e| e.ops_simulated)
                .unwrap_or(0)
        });
    }
}
