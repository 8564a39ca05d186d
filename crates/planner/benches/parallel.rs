//! How fast `vramscope plan --fsdp N` / `--ddp N` answers (issue #33: a
//! plan that finds the fewest GPUs in under 2 s).
//!
//! `cargo bench -p vramscope-planner --bench parallel` (BENCH_RUNS=N to
//! change the repetitions, default 5). In this process, as the CLI runs
//! it: the whole plan (the largest batch per rank, the fewest GPUs for the
//! target, the levers) of Llama-3.1-70B under FSDP2 over 8 H200s, bf16,
//! seq 4096, checkpointing, target batch 64, and of Llama-3.1-8B under DDP
//! over 8; each on one thread and on the threads the machine offers. Each
//! figure is the median and the minimum wall time of N runs.

use std::time::Instant;

// the heap allocator of the `vramscope` binary, so the figures are its
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use vramscope_engine::DType;
use vramscope_models::{
    presets, Checkpointing, DdpConfig, EstimateOptions, FsdpConfig, Parallel, Task, Workload,
};
use vramscope_planner::{plan_parallel, ParallelAsk};

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let options = EstimateOptions {
        profile: vramscope_engine::gpu("h200").expect("the H200").profile(),
        ..EstimateOptions::default()
    };
    let fsdp = Parallel::Fsdp(FsdpConfig {
        world: 8,
        rank: 0,
        param_dtype: None,
        reshard_after_forward: true,
        cpu_offload: false,
    });
    let ddp = Parallel::Ddp(DdpConfig {
        world: 8,
        bucket_cap_mb: None,
        gradient_as_bucket_view: false,
        first_buckets_held: false,
        find_unused_parameters: false,
    });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (model, par) in [("llama-3.1-70b", fsdp), ("llama-3.1-8b", ddp)] {
        let config = presets::get(model).expect("preset");
        let base = Workload {
            weights: DType::BF16,
            checkpointing: Some(Checkpointing::Every(1)),
            ..Workload::train(Task::Causal, 1, 4096)
        };
        for threads in [1, cores] {
            let ask = ParallelAsk {
                target_batch: Some(64),
                sweep: Vec::new(),
                levers: true,
                threads,
            };
            let mut t = Vec::with_capacity(runs);
            let mut answer = None;
            for _ in 0..runs {
                let s = Instant::now();
                answer = Some(plan_parallel(&config, &base, &par, &ask, &options).unwrap());
                t.push(s.elapsed().as_secs_f64());
            }
            t.sort_by(|a, b| a.total_cmp(b));
            let a = answer.expect("ran");
            println!(
                "plan {model} {} over 8, seq 4096, ckpt, target 64, {threads} thread(s): median {:.0} ms, min {:.0} ms (largest {} per rank, fewest {:?}, {} levers)",
                match par {
                    Parallel::Fsdp(_) => "FSDP2",
                    Parallel::Ddp(_) => "DDP",
                },
                t[t.len() / 2] * 1e3,
                t[0] * 1e3,
                a.max_batch_per_rank,
                a.fewest.and_then(|f| f.found),
                a.levers.len()
            );
        }
    }
}
