//! `vramscope plan --mode generate --longest new-tokens|prompt`: the
//! longest generation at one batch under the limit
//! ([`vramscope_planner::most_new_tokens`], [`vramscope_planner::longest_prompt`]).

use std::io::Write;
use std::process::ExitCode;

use clap::ValueEnum;
use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_models::{max_positions, Estimate, EstimateOptions, HfConfig, Oom, Workload};
use vramscope_planner::{longest_prompt, most_new_tokens};

use crate::estimate::emit;
use crate::{EXIT_DIFFERENT, EXIT_OK};

/// What `--longest` searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LongestArg {
    /// the most new tokens for the --seq prompt, up to --new-tokens
    NewTokens,
    /// the longest prompt that still generates --new-tokens tokens
    Prompt,
}

#[derive(Serialize)]
struct ContextJson {
    schema: &'static str,
    model_type: String,
    gpu: &'static str,
    gpu_key: &'static str,
    capacity_bytes: u64,
    longest: &'static str,
    batch: i64,
    /// the prompt: the answer for `prompt`, the one given for `new-tokens`
    seq: i64,
    /// the new tokens: the answer for `new-tokens`, the ones given for `prompt`
    new_tokens: i64,
    /// `new-tokens`: the bound searched (--new-tokens, cut to
    /// `max_position_embeddings` - seq)
    up_to: Option<i64>,
    /// the model's positions, which bound prompt + new tokens (`None`: the
    /// family declares none)
    max_position_embeddings: Option<i64>,
    /// the answer is the bound the positions set, not an out-of-memory
    at_positions_bound: bool,
    peak_reserved_bytes: Option<i64>,
    peak_allocated_bytes: Option<i64>,
    /// the out-of-memory one token (or one prompt length) more meets
    next_oom: Option<NextOomJson>,
}

#[derive(Serialize)]
struct NextOomJson {
    phase: String,
    /// `new-tokens`: the decode step it ran out in
    step: Option<i64>,
    op: String,
    module: String,
    tried_to_allocate_bytes: u64,
}

fn next_oom(o: &Oom, step: Option<i64>) -> NextOomJson {
    NextOomJson {
        phase: o.phase.clone(),
        step,
        op: o.op.clone(),
        module: o.module.clone(),
        tried_to_allocate_bytes: o.bytes,
    }
}

/// Run the search `longest` asks for at `base`'s batch, and print it.
pub fn run(
    config: &HfConfig,
    base: &Workload,
    options: &EstimateOptions,
    capacity: u64,
    longest: LongestArg,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let positions = max_positions(config)?;
    let at_bound;
    let (seq, new_tokens, up_to, at, next): (i64, i64, Option<i64>, Option<Estimate>, _) =
        match longest {
            LongestArg::NewTokens => {
                let m = most_new_tokens(config, base, options, base.new_tokens)?;
                // the long run's out-of-memory, and the step it ended in
                let next = m
                    .long_run
                    .oom
                    .as_ref()
                    .map(|o| next_oom(o, Some(m.long_run.decode_steps.len() as i64)));
                at_bound = m.positions_cap.is_some() && m.new_tokens == m.up_to;
                (base.seq, m.new_tokens, Some(m.up_to), m.at_most, next)
            }
            LongestArg::Prompt => {
                let mb = longest_prompt(config, base, options, &mut |_| {})?;
                let next = mb
                    .first_failure
                    .as_ref()
                    .and_then(|t| t.oom.as_ref().map(|o| next_oom(o, None)));
                at_bound = positions.is_some_and(|p| mb.max_batch + base.new_tokens == p);
                (mb.max_batch, base.new_tokens, None, mb.at_max, next)
            }
        };
    let answer = match longest {
        LongestArg::NewTokens => new_tokens,
        LongestArg::Prompt => seq,
    };
    let mut out: Vec<u8> = Vec::new();
    if json {
        let j = ContextJson {
            schema: "vramscope.plan.context/1",
            model_type: config.model_type.clone(),
            gpu: options.profile.name,
            gpu_key: options.profile.key,
            capacity_bytes: capacity,
            longest: match longest {
                LongestArg::NewTokens => "new-tokens",
                LongestArg::Prompt => "prompt",
            },
            batch: base.batch,
            seq,
            new_tokens,
            up_to,
            max_position_embeddings: positions,
            at_positions_bound: at_bound,
            peak_reserved_bytes: at.as_ref().map(|e| e.peak_reserved_bytes),
            peak_allocated_bytes: at.as_ref().map(|e| e.peak_allocated_bytes),
            next_oom: next,
        };
        serde_json::to_writer_pretty(&mut out, &j)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} generate at batch {}, {}, limit {}",
            config.model_type,
            base.batch,
            options.profile.name,
            format_size(capacity)
        )?;
        let peaks = at
            .as_ref()
            .map(|e| {
                format!(
                    " (peak reserved {}, peak allocated {})",
                    format_size(e.peak_reserved_bytes.max(0) as u64),
                    format_size(e.peak_allocated_bytes.max(0) as u64)
                )
            })
            .unwrap_or_default();
        let bound = match (at_bound, positions) {
            (true, Some(p)) => {
                format!(" (the model's max_position_embeddings, {p}, allows no more)")
            }
            _ => String::new(),
        };
        match longest {
            LongestArg::NewTokens => writeln!(
                out,
                "Most new tokens for a prompt of {seq}: {new_tokens}{}{peaks}",
                if at_bound {
                    bound
                } else if Some(new_tokens) == up_to {
                    format!(" (all {new_tokens} asked for fit)")
                } else {
                    String::new()
                }
            )?,
            LongestArg::Prompt => writeln!(
                out,
                "Longest prompt that generates {new_tokens} new tokens: {seq}{bound}{peaks}"
            )?,
        }
        if let Some(o) = &next {
            writeln!(
                out,
                "One more runs out of memory in {}{} ({}{}): tried to allocate {}",
                o.phase,
                o.step.map(|s| format!(" step {s}")).unwrap_or_default(),
                o.op,
                if o.module.is_empty() {
                    String::new()
                } else {
                    format!(" in {}", o.module)
                },
                format_size(o.tried_to_allocate_bytes)
            )?;
        }
    }
    emit(
        &out,
        ExitCode::from(if answer > 0 { EXIT_OK } else { EXIT_DIFFERENT }),
    )
}
