//! # vramscope-models — Hugging Face model families on the eager twin
//!
//! This crate owns what `vramscope estimate` runs: a Hugging Face
//! `config.json` read into one normalised config per family
//! ([`config`], [`families`]), the model built op by op as transformers 5.x
//! writes it (one file per family, mirroring `modeling_<family>.py` with the
//! default `sdpa` attention), and the workload a user runs — load, train
//! steps (forward with loss, backward, optimizer step, `zero_grad`) or
//! inference passes — phase by phase, with the figures PyTorch would report
//! ([`workload`], [`estimate()`]). Popular configs are embedded as
//! [`presets`].
//!
//! It does no I/O: configs come in as text.

#![deny(missing_docs)]

pub mod config;
mod decode;
mod error;
pub mod estimate;
pub mod families;
pub mod parallel;
pub mod predicted;
pub mod presets;
pub mod requests;
pub mod summary;
pub mod workload;

pub use config::HfConfig;
pub use error::{ModelError, Result};
pub use estimate::{
    estimate, estimate_every_step, workload_requests, workload_run, workload_run_deriving_step1,
    Estimate, EstimateOptions, Oom, PhaseFigures, PhaseSpan, RecordedRun,
};
pub use families::{max_positions, peft_lora_targets, HfModel, Inputs, ModelOutput, ModuleHooks};
pub use parallel::{DdpConfig, FsdpConfig, Parallel};
pub use summary::{group_repeated, ModuleGroup};
pub use vramscope_engine::optim::{Implementation, OptimizerConfig, OptimizerKind};
pub use workload::{CacheKind, Checkpointing, GradMode, LoraSpec, Mode, Task, Workload};
