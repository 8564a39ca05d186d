//! `vramscope demo`: the seed experiments, run on the eager twin.

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_engine::demo;

use crate::EXIT_OK;

/// Arguments of `vramscope demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The case, as in the fixture's `case` field (e.g. `seed000:both`,
    /// `seed002`, `snapshot`); see --list.
    pub case: Option<String>,
    /// List the cases.
    #[arg(long)]
    pub list: bool,
    /// Print JSON lines of the fixture's form (case, step, allocated, peak,
    /// reserved, peak_reserved, requested).
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
        writeln!(out, "Seed experiments (shared/seeds), measured on an H100 in fixtures/seeds/seeds_h100.jsonl:")?;
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
            let sz = |b: i64| format_size(b.max(0) as u64);
            writeln!(
                out,
                "{:<16} allocated {:>11}  peak {:>11}  reserved {:>11}",
                s.step,
                sz(s.allocated),
                sz(s.peak),
                sz(s.reserved)
            )?;
            writeln!(out, "    {}", s.explanation)?;
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
