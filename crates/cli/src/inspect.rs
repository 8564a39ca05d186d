//! `vramscope inspect`: what a snapshot's memory was, at its peak, and why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use vramscope_report::{analyze, html, json, text, Options, Report};

use crate::EXIT_OK;

/// Arguments of `vramscope inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A `torch.cuda.memory._dump_snapshot` pickle.
    pub snapshot: PathBuf,
    /// How many sites and allocations to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Print the full stack of each site.
    #[arg(long)]
    pub stacks: bool,
    /// Print one JSON object (schema: docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained interactive HTML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Which device's trace.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// Read and analyse a snapshot file.
pub fn load(path: &Path, opts: &Options) -> anyhow::Result<(vramscope_snapshot::Snapshot, Report)> {
    let snap = vramscope_snapshot::read_snapshot_file(path).with_context(|| {
        format!(
            "{} is not a readable PyTorch memory snapshot",
            path.display()
        )
    })?;
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let mut r = analyze(&snap, &cfg, opts);
    r.snapshot = path.display().to_string();
    Ok((snap, r))
}

/// Run `vramscope inspect`.
pub fn run(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let opts = Options {
        top: args.top,
        stacks: args.stacks,
        device: args.device,
        ..Options::default()
    };
    let (snap, report) = load(&args.snapshot, &opts)?;
    if let Some(out) = &args.html {
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        let page = html::render_snapshot(&snap, &cfg, &report);
        std::fs::write(out, page).with_context(|| format!("cannot write {}", out.display()))?;
    }
    let s = if args.json {
        json::render(&report)
    } else {
        text::render(&report, args.stacks)
    };
    std::io::stdout().lock().write_all(s.as_bytes())?;
    Ok(ExitCode::from(EXIT_OK))
}
