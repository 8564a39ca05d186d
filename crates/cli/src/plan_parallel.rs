//! `vramscope plan --fsdp N` / `--ddp N`: under FSDP2 or DDP, the largest
//! batch per rank on N GPUs, the fewest GPUs for a global batch
//! (`--target-batch`), and the levers at the batch found (FSDP against DDP,
//! resharding, mixed precision, checkpointing, CPU offload, more GPUs),
//! each from the twin's run of every rank that differs (the GPU's own
//! out-of-memory path decides "fits"; `vramscope_planner::plan_parallel`
//! runs them): this module renders the answer.

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_models::{EstimateOptions, HfConfig, Parallel, Task};
use vramscope_planner::{plan_parallel, ParallelAsk, MAX_GPUS};

use crate::estimate::emit;
use crate::plan::PlanArgs;
use crate::{EXIT_DIFFERENT, EXIT_OK};

#[derive(Serialize)]
struct LeverJson {
    name: String,
    peak_reserved_bytes: i64,
    fits: bool,
}

#[derive(Serialize)]
struct SweepRowJson {
    batch_per_rank: i64,
    global_batch: i64,
    peak_reserved_bytes: i64,
    fits: bool,
}

#[derive(Serialize)]
struct FewestJson {
    target_batch: i64,
    /// `None` (null) when not even `MAX_GPUS` GPUs fit it
    gpus: Option<i64>,
    batch_per_rank: Option<i64>,
}

#[derive(Serialize)]
struct PlanFsdpJson<'a> {
    schema: &'static str,
    /// `fsdp` or `ddp`
    parallel: &'static str,
    model_type: &'a str,
    gpu: &'a str,
    world: i64,
    seq: i64,
    max_batch_per_rank: i64,
    /// why the search stopped with no batch running out (then
    /// `max_batch_per_rank` is a lower bound)
    max_batch_capped_by: Option<String>,
    /// every batch per rank above `max_batch_per_rank` up to this one was
    /// run and does not fit (whether a batch fits is not monotone in it)
    max_batch_checked_up_to: i64,
    max_global_batch: i64,
    peak_reserved_bytes: i64,
    fewest_gpus: Option<FewestJson>,
    levers: Vec<LeverJson>,
    /// with `--batch`: one row per batch per rank
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<Vec<SweepRowJson>>,
}

/// Run `vramscope plan --fsdp N` or `--ddp N`.
pub fn run(args: &PlanArgs, config: &HfConfig) -> anyhow::Result<ExitCode> {
    if args.csv || args.html.is_some() {
        bail!(
            "plan --fsdp/--ddp prints text or --json; --csv and --html are for the one-GPU sweep"
        );
    }
    if args.workload.seqs().len() > 1 {
        bail!("plan --fsdp/--ddp takes one --seq");
    }
    let profile = args.gpu.profile()?;
    let options = EstimateOptions {
        profile: profile.clone(),
        allocator: args.workload.allocator()?,
        memory_fraction: args.gpu.fraction()?,
        unlimited: false,
        record_trace: false,
    };
    let base = args.workload.workload(config, 1);
    let Some(par) = args.parallel.parallel(0)? else {
        bail!("plan --fsdp/--ddp needs --fsdp N or --ddp N");
    };
    let world = par.world();
    let ask = ParallelAsk {
        target_batch: args.target_batch,
        sweep: args.batch.as_ref().map(|l| l.0.clone()).unwrap_or_default(),
        levers: !args.no_levers,
        // one thread: on the 2-vCPU machine this was measured on, two made
        // the 70B plan slower (`cargo bench -p vramscope-planner --bench
        // parallel`, docs/performance.md)
        threads: 1,
    };
    let plan = plan_parallel(config, &base, &par, &ask, &options)?;
    let max = plan.max_batch_per_rank;
    let at = plan.at;
    let fewest = plan.fewest.map(|f| FewestJson {
        target_batch: f.target_batch,
        gpus: f.found.map(|f| f.0),
        batch_per_rank: f.found.map(|f| f.1),
    });
    let sweep = args.batch.as_ref().map(|_| {
        plan.sweep
            .iter()
            .map(|&(b, o)| SweepRowJson {
                batch_per_rank: b,
                global_batch: b * world,
                peak_reserved_bytes: o.peak_reserved_bytes,
                fits: o.fits,
            })
            .collect::<Vec<_>>()
    });
    let levers: Vec<LeverJson> = std::iter::once(LeverJson {
        name: "as given".into(),
        peak_reserved_bytes: plan.here.peak_reserved_bytes,
        fits: plan.here.fits,
    })
    .chain(plan.levers.iter().map(|l| LeverJson {
        name: l.name.clone(),
        peak_reserved_bytes: l.outcome.peak_reserved_bytes,
        fits: l.outcome.fits,
    }))
    .collect();
    let (kind, title) = match par {
        Parallel::Fsdp(_) => ("fsdp", "FSDP2"),
        Parallel::Ddp(_) => ("ddp", "DDP"),
    };
    let mut out: Vec<u8> = Vec::new();
    if args.json {
        let j = PlanFsdpJson {
            schema: if kind == "fsdp" {
                "vramscope.plan_fsdp/1"
            } else {
                "vramscope.plan_ddp/1"
            },
            parallel: kind,
            model_type: &config.model_type,
            gpu: profile.name,
            world,
            seq: base.seq,
            max_batch_per_rank: max,
            max_batch_capped_by: plan.capped.clone(),
            max_batch_checked_up_to: plan.checked_up_to,
            max_global_batch: max * world,
            peak_reserved_bytes: plan.here.peak_reserved_bytes,
            fewest_gpus: fewest,
            levers,
            sweep,
        };
        serde_json::to_writer_pretty(&mut out, &j)?;
        writeln!(out)?;
    } else {
        if max == 0 {
            writeln!(
                out,
                "{title} over {} GPUs ({}): not even batch 1 per rank fits",
                world, profile.name
            )?;
        } else {
            writeln!(
                out,
                "{title} over {} GPUs ({}): largest batch per rank {}{max} (global {}){}{}",
                world,
                profile.name,
                if plan.capped.is_some() {
                    "at least "
                } else {
                    ""
                },
                max * world,
                if base.task == Task::Image {
                    String::new()
                } else {
                    format!(", seq {}", base.seq)
                },
                plan.capped
                    .as_ref()
                    .map(|c| format!("; the search stopped: {c}"))
                    .unwrap_or_default()
            )?;
        }
        if let Some(f) = &fewest {
            match (f.gpus, f.batch_per_rank) {
                (Some(n), Some(b)) => writeln!(
                    out,
                    "global batch {}: fewest GPUs {n} (batch {b} per rank)",
                    f.target_batch
                )?,
                _ => writeln!(
                    out,
                    "global batch {}: does not fit on any of 2 to {MAX_GPUS} GPUs",
                    f.target_batch
                )?,
            }
        }
        if let Some(rows) = &sweep {
            writeln!(out)?;
            writeln!(
                out,
                "{:>15} {:>13} {:>14}  fits",
                "batch per rank", "global batch", "peak reserved"
            )?;
            for r in rows {
                writeln!(
                    out,
                    "{:>15} {:>13} {:>14}  {}",
                    r.batch_per_rank,
                    r.global_batch,
                    format_size(r.peak_reserved_bytes.max(0) as u64),
                    if r.fits { "yes" } else { "no" }
                )?;
            }
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<60} {:>12}  fits",
            format!("levers at batch {at} per rank (the fullest rank)"),
            "peak reserved"
        )?;
        for l in &levers {
            writeln!(
                out,
                "  {:<58} {:>12}  {}",
                l.name,
                format_size(l.peak_reserved_bytes.max(0) as u64),
                if l.fits { "yes" } else { "no" }
            )?;
        }
    }
    emit(
        &out,
        ExitCode::from(if max > 0 { EXIT_OK } else { EXIT_DIFFERENT }),
    )
}
