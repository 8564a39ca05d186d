//! `vramscope demo`: the seed experiments, run on the eager twin.

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use vramscope_engine::demo;

use crate::{signed_size, EXIT_OK};

/// Arguments of `vramscope demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The experiment (e.g. `seed000:both`, `seed002`, `snapshot`); --list
    /// lists them.
    pub case: Option<String>,
    /// List the cases.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON line per step (case, step, allocated, peak, reserved,
    /// peak_reserved, requested: the torch.cuda figures, in bytes).
    #[arg(long)]
    pub json: bool,
}

/// One JSON line: the figures `torch.cuda` reports after a step.
#[derive(Debug, Serialize)]
struct StepJson<'a> {
    case: &'a str,
    step: &'a str,
    allocated: i64,
    peak: i64,
    reserved: i64,
    peak_reserved: i64,
    requested: i64,
}

/// Run `vramscope demo`.
pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if args.list || args.case.is_none() {
        writeln!(out, "Built-in experiments (each one measured on an H100; the twin gives every figure byte for byte):")?;
        for c in demo::cases() {
            writeln!(out, "  {c}")?;
        }
        writeln!(out, "Run one with: vramscope demo CASE [--json]")?;
        return Ok(ExitCode::from(EXIT_OK));
    }
    let case = args.case.as_deref().unwrap_or_default();
    if !demo::cases().contains(&case) {
        bail!("unknown case '{case}'; `vramscope demo --list` lists them");
    }
    let steps = demo::run(case)?;
    for s in &steps {
        if args.json {
            let j = StepJson {
                case: &s.case,
                step: &s.step,
                allocated: s.allocated,
                peak: s.peak,
                reserved: s.reserved,
                peak_reserved: s.peak_reserved,
                requested: s.requested,
            };
            serde_json::to_writer(&mut out, &j)?;
            writeln!(out)?;
        } else {
            writeln!(
                out,
                "{:<16} allocated {:>11}  peak {:>11}  reserved {:>11}",
                s.step,
                signed_size(s.allocated),
                signed_size(s.peak),
                signed_size(s.reserved)
            )?;
            writeln!(out, "    {}", s.explanation)?;
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
