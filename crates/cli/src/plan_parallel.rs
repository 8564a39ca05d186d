//! `vramscope plan --fsdp N` / `--ddp N`: under FSDP2 or DDP, the largest
//! batch per rank on N GPUs, the fewest GPUs for a global batch
//! (`--target-batch`), and the levers at the batch found (FSDP against DDP,
//! resharding, mixed precision, checkpointing, CPU offload, more GPUs),
//! each from the twin's run of every rank that differs (the GPU's own
//! out-of-memory path decides "fits").

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_engine::DType;
use vramscope_models::parallel::fsdp::rank_classes;
use vramscope_models::{
    estimate, Checkpointing, DdpConfig, EstimateOptions, FsdpConfig, HfConfig, Parallel, Workload,
};

use crate::estimate::emit;
use crate::plan::PlanArgs;
use crate::{EXIT_DIFFERENT, EXIT_OK};

/// The most GPUs the fewest-GPUs search tries.
const MAX_GPUS: i64 = 64;
/// The largest batch per rank the search tries.
const MAX_BATCH: i64 = 1 << 16;

/// What one workload gives on every rank: whether all fit, and the fullest
/// rank's peak reserved (without a limit where one ran out).
struct Outcome {
    fits: bool,
    peak_reserved: i64,
}

/// `par` over `n` ranks.
fn with_world(par: &Parallel, n: i64) -> Parallel {
    match par {
        Parallel::Fsdp(f) => Parallel::Fsdp(FsdpConfig {
            world: n,
            ..f.clone()
        }),
        Parallel::Ddp(d) => Parallel::Ddp(DdpConfig {
            world: n,
            ..d.clone()
        }),
    }
}

/// One rank of each group whose memory is the same: FSDP's ranks that
/// shard alike; under DDP every rank is the same.
fn representatives(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
) -> anyhow::Result<Vec<Parallel>> {
    Ok(match par {
        Parallel::Fsdp(f) => rank_classes(config, base.task, f.world)?
            .into_iter()
            .map(|ranks| {
                Parallel::Fsdp(FsdpConfig {
                    rank: ranks[0],
                    ..f.clone()
                })
            })
            .collect(),
        Parallel::Ddp(_) => vec![par.clone()],
    })
}

fn run_ranks(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
) -> anyhow::Result<Outcome> {
    run_ranks_for(config, base, par, options, true)
}

/// [`run_ranks`]; without `figures`, whether all fit only (no run without
/// a limit after an out-of-memory, and the first rank that runs out ends it).
fn run_ranks_for(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
    figures: bool,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome {
        fits: true,
        peak_reserved: 0,
    };
    for p in representatives(config, base, par)? {
        let w = Workload {
            parallel: Some(p),
            ..base.clone()
        };
        let mut e = estimate(config, &w, options)?;
        if e.oom.is_some() {
            out.fits = false;
            if !figures {
                return Ok(out);
            }
            e = estimate(config, &w, &options.without_limit())?;
        }
        out.peak_reserved = out.peak_reserved.max(e.peak_reserved_bytes);
    }
    Ok(out)
}

/// The largest batch per rank that fits (0: not even 1).
fn largest_batch(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
) -> anyhow::Result<i64> {
    let fits = |b: i64| -> anyhow::Result<bool> {
        let w = Workload {
            batch: b,
            ..base.clone()
        };
        Ok(run_ranks_for(config, &w, par, options, false)?.fits)
    };
    if !fits(1)? {
        return Ok(0);
    }
    // doubling, then bisection between the last fit and the first failure
    let (mut lo, mut hi) = (1, 2);
    while hi <= MAX_BATCH && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > MAX_BATCH {
        return Ok(lo);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

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
    let max = largest_batch(config, &base, &par, &options)?;
    let at = args.target_batch.map_or(max.max(1), |t| div_up(t, world));
    let given = Workload {
        batch: at,
        ..base.clone()
    };
    let here = run_ranks(config, &given, &par, &options)?;
    // the fewest GPUs for a global batch: each rank runs ceil(B / n). A
    // rank's memory need not fall as n grows (FSDP pads uneven shards, and
    // ceil(B / n) stays put over runs of n), so every n from 2 up is checked
    // in order and the first that fits is the fewest
    let fewest = match args.target_batch {
        Some(t) => {
            let mut found = None;
            for n in 2..=MAX_GPUS {
                let w = Workload {
                    batch: div_up(t, n),
                    ..base.clone()
                };
                if run_ranks_for(config, &w, &with_world(&par, n), &options, false)?.fits {
                    found = Some((n, div_up(t, n)));
                    break;
                }
            }
            Some(FewestJson {
                target_batch: t,
                gpus: found.map(|f| f.0),
                batch_per_rank: found.map(|f| f.1),
            })
        }
        None => None,
    };
    // `--batch`: each batch per rank run on every rank that differs
    let sweep = match &args.batch {
        Some(list) => {
            let mut rows = Vec::new();
            for &b in &list.0 {
                let w = Workload {
                    batch: b,
                    ..base.clone()
                };
                let o = run_ranks(config, &w, &par, &options)?;
                rows.push(SweepRowJson {
                    batch_per_rank: b,
                    global_batch: b * world,
                    peak_reserved_bytes: o.peak_reserved,
                    fits: o.fits,
                });
            }
            Some(rows)
        }
        None => None,
    };
    let levers_at = if args.no_levers {
        Vec::new()
    } else {
        levers(&par, &given, base.weights)
    };
    let mut levers = vec![LeverJson {
        name: "as given".into(),
        peak_reserved_bytes: here.peak_reserved,
        fits: here.fits,
    }];
    for (name, w, p) in levers_at {
        let o = run_ranks(config, &w, &p, &options)?;
        levers.push(LeverJson {
            name,
            peak_reserved_bytes: o.peak_reserved,
            fits: o.fits,
        });
    }
    // twice the GPUs: the same global batch (the target's), or the same
    // batch per rank
    if !args.no_levers {
        let per = args.target_batch.map_or(at, |t| div_up(t, world * 2));
        let w = Workload {
            batch: per,
            ..given.clone()
        };
        let o = run_ranks(config, &w, &with_world(&par, world * 2), &options)?;
        levers.push(LeverJson {
            name: format!("{} GPUs, batch {per} per rank", world * 2),
            peak_reserved_bytes: o.peak_reserved,
            fits: o.fits,
        });
    }
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
            max_global_batch: max * world,
            peak_reserved_bytes: here.peak_reserved,
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
                "{title} over {} GPUs ({}): largest batch per rank {max} (global {}), seq {}",
                world,
                profile.name,
                max * world,
                base.seq
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

/// The levers at the same batch per rank and world size, each named, with
/// its workload and parallelism: FSDP's mixed precision, resharding, CPU
/// offload and DDP instead; DDP's gradients as bucket views and FSDP
/// instead (with bf16 mixed precision too, for fp32 weights); checkpointing.
fn levers(par: &Parallel, given: &Workload, weights: DType) -> Vec<(String, Workload, Parallel)> {
    let mut v: Vec<(String, Workload, Parallel)> = Vec::new();
    let fsdp_default = FsdpConfig {
        world: par.world(),
        rank: 0,
        param_dtype: None,
        reshard_after_forward: true,
        cpu_offload: false,
    };
    let mp = "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)";
    match par {
        Parallel::Fsdp(f) => {
            if f.param_dtype.is_none() && weights == DType::F32 {
                let p = FsdpConfig {
                    param_dtype: Some(DType::BF16),
                    ..f.clone()
                };
                v.push((mp.into(), given.clone(), Parallel::Fsdp(p)));
            }
            let flipped = if f.reshard_after_forward {
                "False"
            } else {
                "None (the default)"
            };
            let p = FsdpConfig {
                reshard_after_forward: !f.reshard_after_forward,
                ..f.clone()
            };
            v.push((
                format!("reshard_after_forward={flipped}"),
                given.clone(),
                Parallel::Fsdp(p),
            ));
            if !f.cpu_offload {
                let p = FsdpConfig {
                    cpu_offload: true,
                    ..f.clone()
                };
                v.push((
                    "CPUOffloadPolicy()".into(),
                    given.clone(),
                    Parallel::Fsdp(p),
                ));
            }
            let d = DdpConfig {
                world: f.world,
                bucket_cap_mb: None,
                gradient_as_bucket_view: false,
                first_buckets_held: false,
            };
            v.push((
                "DDP instead (its defaults)".into(),
                given.clone(),
                Parallel::Ddp(d),
            ));
        }
        Parallel::Ddp(d) => {
            if !d.gradient_as_bucket_view {
                let p = DdpConfig {
                    gradient_as_bucket_view: true,
                    ..d.clone()
                };
                v.push((
                    "gradient_as_bucket_view=True".into(),
                    given.clone(),
                    Parallel::Ddp(p),
                ));
            }
            v.push((
                "FSDP2 instead (fully_shard per layer)".into(),
                given.clone(),
                Parallel::Fsdp(fsdp_default.clone()),
            ));
            if weights == DType::F32 {
                let p = FsdpConfig {
                    param_dtype: Some(DType::BF16),
                    ..fsdp_default
                };
                v.push((
                    "FSDP2 instead, MixedPrecisionPolicy(param_dtype=bf16)".to_string(),
                    given.clone(),
                    Parallel::Fsdp(p),
                ));
            }
        }
    }
    if given.checkpointing.is_none() {
        v.push((
            "gradient checkpointing of every layer".into(),
            Workload {
                checkpointing: Some(Checkpointing::Every(1)),
                ..given.clone()
            },
            par.clone(),
        ));
    }
    v
}

fn div_up(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}
