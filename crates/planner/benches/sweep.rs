//! How fast a sweep runs (issue #6: at least 1,000 estimates per second on
//! one core for a 7B-class config).
//!
//! `cargo bench -p vramscope-planner` (BENCH_RUNS=N to change the
//! repetitions). Single-threaded, in this process: the sweep of
//! llama-3.1-8b, bf16 weights, batch 1..64 x seq 512, 1024, 2048, 4096 on
//! an H100, training (AdamW, 3 steps) and inference (2 forwards), as
//! `vramscope plan --batch 1..64 --seq 512,1024,2048,4096` runs it; then
//! its two parts apart: one run of the model (the requests of a workload)
//! and one cell's replay of them on the allocator twin.

use std::time::Instant;

// the heap allocator of the `vramscope` binary, so the figures are its
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use vramscope_engine::DType;
use vramscope_models::requests::verdict;
use vramscope_models::{presets, workload_requests, EstimateOptions, Mode, Task, Workload};
use vramscope_planner::sweep;

fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[t.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let config = presets::get("llama-3.1-8b").expect("preset");
    let options = EstimateOptions::default();
    let batches: Vec<i64> = (1..=64).collect();
    let seqs = [512, 1024, 2048, 4096];
    for mode in [Mode::Train, Mode::Infer] {
        let base = Workload {
            weights: DType::BF16,
            mode,
            steps: if mode == Mode::Train { 3 } else { 2 },
            ..Workload::train(Task::Causal, 1, 512)
        };
        let mut cells = 0;
        let mut ran = 0;
        let t = median(runs, || {
            let out = sweep(&config, &base, &batches, &seqs, &options, &mut |_| {}).unwrap();
            cells = out.len();
            ran = out.iter().filter(|c| c.model_ran).count();
        });
        println!(
            "sweep llama-3.1-8b {mode:?} bf16, {cells} cells (the model ran at {ran}): median {:.1} ms, {:.0} cells/s",
            t * 1e3,
            cells as f64 / t
        );
        let w = Workload {
            batch: 32,
            seq: 2048,
            ..base.clone()
        };
        let free = EstimateOptions {
            unlimited: true,
            ..options.clone()
        };
        let reqs = workload_requests(&config, &w, &free).unwrap().unwrap();
        let run = median(runs, || {
            workload_requests(&config, &w, &free).unwrap();
        });
        let replay = median(runs, || {
            verdict(&reqs, &options);
        });
        println!(
            "  batch 32, seq 2048: one model run {:.2} ms; one cell's replay of its {} requests {:.2} ms",
            run * 1e3,
            reqs.requests.len(),
            replay * 1e3
        );
    }
}
