//! `vramscope diff`: what grew between two snapshots, and where.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use vramscope_alloc::format_size;
use vramscope_report::diff::{diff, render_text, Threshold};
use vramscope_report::Options;

use crate::{EXIT_DIFFERENT, EXIT_OK};

/// Arguments of `vramscope diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline snapshot.
    pub a: PathBuf,
    /// The new snapshot.
    pub b: PathBuf,
    /// Exit 1 when peak allocated grows by more than this (`50MiB`, `5%`).
    #[arg(long, value_name = "BYTES|PERCENT")]
    pub fail_over: Option<Threshold>,
    /// How many sites to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run `vramscope diff`.
pub fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    let opts = Options {
        top: usize::MAX,
        ..Options::default()
    };
    // the two files are read and analysed at once, on two threads
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| crate::inspect::load(&args.a, &opts).map(|(_, r)| r));
        let b = crate::inspect::load(&args.b, &opts).map(|(_, r)| r);
        let a = a
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("reading {} failed", args.a.display())));
        (a, b)
    });
    let (a, b) = (a?, b?);
    let d = diff(&a, &b);
    let s = if args.json {
        let mut s = serde_json::to_string_pretty(&d)?;
        s.push('\n');
        s
    } else {
        render_text(&d, args.top)
    };
    std::io::stdout().lock().write_all(s.as_bytes())?;
    let fail = args.fail_over.is_some_and(|t| d.exceeds(t));
    if let (true, Some(t)) = (fail, args.fail_over) {
        let limit = match t {
            Threshold::Bytes(b) => format_size(b),
            Threshold::Percent(p) => format!("{p}%"),
        };
        eprintln!(
            "FAIL: peak allocated grew from {} to {}, more than --fail-over {limit}",
            format_size(d.a_peak_allocated_bytes),
            format_size(d.b_peak_allocated_bytes)
        );
    }
    Ok(ExitCode::from(if fail { EXIT_DIFFERENT } else { EXIT_OK }))
}
