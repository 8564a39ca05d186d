//! `vramscope plan` on one GPU when the batch asked for does not fit there
//! (not even batch 1, or `--target-batch`): the fewest GPUs under FSDP2 and
//! under DDP, each with the defaults `plan --fsdp N` / `--ddp N` run, from
//! the planner's fewest-GPUs search ([`vramscope_planner::fewest_gpus_and_peak`]),
//! and the command that plans there.

use std::io::Write;

use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_models::{Checkpointing, EstimateOptions, HfConfig, Mode, Parallel, Workload};
use vramscope_planner::{fewest_gpus_and_peak, not_modelled, MAX_GPUS};

use crate::estimate::ParallelArgs;

/// One way past one GPU.
#[derive(Debug, Serialize)]
pub(crate) struct WayJson {
    /// `fsdp` or `ddp`
    parallel: &'static str,
    /// this way adds `--checkpointing` (every layer) to the plan
    adds_checkpointing: bool,
    /// the fewest GPUs (null: none of 2 to `max_gpus`)
    gpus: Option<i64>,
    /// the batch per rank at `gpus` (at `max_gpus` when `gpus` is null)
    batch_per_rank: i64,
    /// the fullest rank's peak reserved there (without the limit where it
    /// does not fit)
    peak_reserved_bytes: i64,
    /// the command that plans at `gpus`
    command: Option<String>,
    /// why the twin could not answer (what it does not model under this
    /// parallelism); the other fields are then 0 and null
    not_modelled: Option<String>,
}

/// `plan --json`'s `sharding`.
#[derive(Debug, Serialize)]
pub(crate) struct ShardingJson {
    /// the global batch searched (`--target-batch`); null: batch 1 per rank
    target_batch: Option<i64>,
    /// the most GPUs searched
    max_gpus: i64,
    ways: Vec<WayJson>,
}

/// The parallelism `plan --fsdp n` (`ddp`: `--ddp n`) runs with no other
/// option: its defaults, from the same arguments.
fn default_parallel(ddp: bool, n: i64) -> anyhow::Result<Parallel> {
    let args = ParallelArgs {
        fsdp: (!ddp).then_some(n),
        fsdp_param_dtype: None,
        fsdp_no_reshard: false,
        fsdp_cpu_offload: false,
        fsdp_rank: None,
        ddp: ddp.then_some(n),
        ddp_bucket_mb: None,
        ddp_grad_as_bucket_view: false,
        ddp_find_unused_parameters: false,
    };
    args.parallel(0)?
        .ok_or_else(|| anyhow::anyhow!("no parallelism"))
}

/// `argv` (the plan's own arguments, `plan` first) as one shell command
/// with `extra` appended (`--csv` left out: `plan --fsdp` refuses it).
fn command(argv: &[String], extra: &str) -> Option<String> {
    if argv.is_empty() {
        return None;
    }
    let quote = |a: &String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
        {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let words: Vec<String> = argv
        .iter()
        .filter(|a| a.as_str() != "--csv")
        .map(quote)
        .collect();
    Some(format!("vramscope {} {extra}", words.join(" ")))
}

/// The fewest GPUs for `target` (`None`: batch 1 per rank) under FSDP2 and
/// under DDP, each with its defaults; where FSDP2 fits on none, in training
/// without checkpointing, FSDP2 with checkpointing of every layer too.
pub(crate) fn sharding(
    config: &HfConfig,
    base: &Workload,
    options: &EstimateOptions,
    target: Option<i64>,
    argv: &[String],
) -> anyhow::Result<ShardingJson> {
    // batch 1 per rank: the global batch 1, whose share is 1 on any count
    let want = target.unwrap_or(1);
    let mut ways: Vec<WayJson> = Vec::new();
    // whether it was modelled, and found a count
    let mut way = |ddp: bool, ckpt: bool| -> anyhow::Result<(bool, bool)> {
        let w = Workload {
            checkpointing: if ckpt {
                Some(Checkpointing::Every(1))
            } else {
                base.checkpointing.clone()
            },
            ..base.clone()
        };
        let kind = if ddp { "ddp" } else { "fsdp" };
        let mut j = WayJson {
            parallel: kind,
            adds_checkpointing: ckpt,
            gpus: None,
            batch_per_rank: 0,
            peak_reserved_bytes: 0,
            command: None,
            not_modelled: None,
        };
        match fewest_gpus_and_peak(config, &w, &default_parallel(ddp, 2)?, want, options) {
            Ok(f) => {
                j.gpus = f.fewest.found.map(|(n, _)| n);
                j.batch_per_rank = f.at.1;
                j.peak_reserved_bytes = f.outcome.peak_reserved_bytes;
                j.command = j.gpus.and_then(|n| {
                    command(
                        argv,
                        &format!("{}--{kind} {n}", if ckpt { "--checkpointing " } else { "" }),
                    )
                });
            }
            Err(e) if not_modelled(&e) => j.not_modelled = Some(e.to_string()),
            Err(e) => return Err(e.into()),
        }
        let answer = (j.not_modelled.is_none(), j.gpus.is_some());
        ways.push(j);
        Ok(answer)
    };
    // (checkpointing does not make modelled what FSDP2 alone is not)
    if way(false, false)? == (true, false)
        && base.mode == Mode::Train
        && base.checkpointing.is_none()
    {
        way(false, true)?;
    }
    way(true, false)?;
    Ok(ShardingJson {
        target_batch: target,
        max_gpus: MAX_GPUS,
        ways,
    })
}

/// The text lines of `s`.
pub(crate) fn lines(out: &mut Vec<u8>, s: &ShardingJson) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "Past one GPU ({}; each the fullest rank's peak reserved):",
        match s.target_batch {
            Some(b) => format!("global batch {b}, ceil({b} / N) per rank"),
            None => "batch 1 per rank".into(),
        }
    )?;
    for w in &s.ways {
        let name = match (w.parallel, w.adds_checkpointing) {
            ("fsdp", false) => "FSDP2 (fully_shard, its defaults)",
            ("fsdp", true) => "FSDP2 (its defaults) with --checkpointing",
            _ => "DDP (its defaults; every rank holds the whole model)",
        };
        if let Some(why) = &w.not_modelled {
            writeln!(out, "  {name}: not modelled: {why}")?;
            continue;
        }
        let peak = format_size(w.peak_reserved_bytes.max(0) as u64);
        match w.gpus {
            Some(n) => {
                writeln!(
                    out,
                    "  {name}: fewest GPUs {n}{}, peak reserved {peak}",
                    if s.target_batch.is_some() {
                        format!(" (batch {} per rank)", w.batch_per_rank)
                    } else {
                        String::new()
                    }
                )?;
                if let Some(c) = &w.command {
                    writeln!(out, "    {c}")?;
                }
            }
            None => writeln!(
                out,
                "  {name}: fits on none of 2 to {m} GPUs (at {m}, batch {} per rank: peak reserved {peak})",
                w.batch_per_rank,
                m = s.max_gpus,
            )?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_the_plan_given_with_the_parallelism_and_quoted() {
        let argv: Vec<String> = ["plan", "--config", "my dir/c.json", "--csv", "--json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            command(&argv, "--fsdp 3").unwrap(),
            "vramscope plan --config 'my dir/c.json' --json --fsdp 3"
        );
        assert_eq!(command(&[], "--fsdp 3"), None);
    }

    #[test]
    fn the_defaults_are_those_of_fsdp_n_and_ddp_n() {
        let Parallel::Fsdp(f) = default_parallel(false, 5).unwrap() else {
            panic!("not FSDP")
        };
        assert_eq!(
            (
                f.world,
                f.rank,
                f.param_dtype,
                f.reshard_after_forward,
                f.cpu_offload
            ),
            (5, 0, None, true, false)
        );
        let Parallel::Ddp(d) = default_parallel(true, 5).unwrap() else {
            panic!("not DDP")
        };
        assert_eq!(
            (d.world, d.bucket_cap_mb, d.gradient_as_bucket_view),
            (5, None, false)
        );
    }
}
