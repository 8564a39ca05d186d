//! # vramscope-planner — "what fits?"
//!
//! This crate owns the decisions `vramscope plan` makes on top of the
//! estimator ([`vramscope_models::estimate()`]): the largest batch that
//! completes every step of a workload under a memory limit, found with the
//! allocator twin's real out-of-memory path (free the cache, retry, fail);
//! what each lever (dtype, autocast, optimizer, checkpointing, allocator
//! settings, gradient accumulation, inference modes) does to the peak and to
//! the largest batch; the longest generation at a batch (new tokens or
//! prompt); sweeps over batch and sequence length; and, under FSDP2 or DDP,
//! the largest batch per rank, the fewest GPUs for a global batch and the
//! levers there.
//!
//! Every answer is a run of the twin, never a rule of thumb. It does no I/O.

#![deny(missing_docs)]

mod boundary;
mod context;
mod levers;
mod parallel;
mod search;
mod sweep;

pub use boundary::{boundary, Boundary, SCAN_LIMIT};
pub use context::{longest_prompt, most_new_tokens, MostNewTokens};
pub use levers::{
    checkpoint_for_batch, lever_list, levers, num_layers, Lever, LeverOutcome, MinimalCheckpointing,
};
pub use parallel::{
    fewest_gpus, fewest_gpus_and_peak, largest_batch_per_rank, plan_parallel, run_ranks,
    with_world, Fewest, FewestAndPeak, Largest, ParallelAsk, ParallelLever, ParallelPlan,
    RanksOutcome, MAX_BATCH_PER_RANK, MAX_GPUS,
};
pub use search::{max_batch, not_modelled, try_batch, MaxBatch, Try, MAX_BATCH_CAP};
pub use sweep::{sweep, SweepCell};
