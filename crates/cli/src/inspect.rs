//! `vramscope inspect`: what a snapshot's memory was, at its peak, and why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use vramscope_report::analysis::analyze_timeline;
use vramscope_report::timeline::{self, Timeline};
use vramscope_report::{html, json, text, Options, Report};

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
    /// Which device's trace (default: the first device with a trace, as
    /// memory_viz picks it; a multi-GPU host's snapshot lists every device).
    #[arg(long)]
    pub device: Option<usize>,
    /// Report on part of the trace only: its peaks, what is live at the
    /// peak, the curve and the out-of-memory events within trace entries
    /// `T0..T1` (`1000..5000`, `200000..`), or within seconds from the
    /// trace's first entry (`2.5s..4s`). The allocator's state inside the
    /// range is still followed from the first entry.
    #[arg(long, value_name = "T0..T1")]
    pub range: Option<String>,
}

/// One end of `--range`: a trace entry or seconds from the first entry.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Entry(usize),
    Seconds(f64),
}

/// Parse `--range`'s `T0..T1` (either end may be left out).
fn parse_range(s: &str) -> anyhow::Result<(Option<End>, Option<End>)> {
    let bad = || {
        anyhow::anyhow!(
            "--range {s:?}: expected T0..T1, trace entries (1000..5000) or seconds from the first entry (2.5s..4s)"
        )
    };
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let end = |t: &str| -> anyhow::Result<Option<End>> {
        let t = t.trim();
        if t.is_empty() {
            return Ok(None);
        }
        if let Some(x) = t.strip_suffix('s') {
            let v: f64 = x.trim().parse().map_err(|_| bad())?;
            if !v.is_finite() || v < 0.0 {
                return Err(bad());
            }
            return Ok(Some(End::Seconds(v)));
        }
        Ok(Some(End::Entry(t.parse().map_err(|_| bad())?)))
    };
    Ok((end(a)?, end(b)?))
}

/// `--range` as trace entries of `trace`: seconds are counted from the
/// first entry's `time_us` (entries are in time order).
pub fn resolve_range(
    spec: &str,
    trace: &vramscope_snapshot::Trace,
) -> anyhow::Result<std::ops::Range<usize>> {
    let (a, b) = parse_range(spec)?;
    let n = trace.len();
    let t0 = trace.time_us(0);
    let at = |e: Option<End>, default: usize| -> anyhow::Result<usize> {
        Ok(match e {
            None => default,
            Some(End::Entry(i)) => i.min(n),
            Some(End::Seconds(s)) => {
                let t0 = t0.ok_or_else(|| {
                    anyhow::anyhow!(
                        "--range {spec:?}: the trace records no times; give trace entries instead"
                    )
                })?;
                let t = t0.saturating_add((s * 1e6).round() as i64);
                partition_point(n, |i| trace.time_us(i).is_some_and(|x| x < t))
            }
        })
    };
    let (from, to) = (at(a, 0)?, at(b, n)?);
    if from >= to {
        anyhow::bail!(
            "--range {spec:?} selects no trace entries (from {from} to {to}; the trace has {n})"
        );
    }
    Ok(from..to)
}

/// The first `i` in `0..n` where `below(i)` is false (`below` true then
/// false along the trace).
fn partition_point(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Read and analyse a snapshot file.
pub fn load(path: &Path, opts: &Options) -> anyhow::Result<(vramscope_snapshot::Snapshot, Report)> {
    load_range(path, opts, None)
}

/// Read and analyse a snapshot file, over `--range` when given.
pub fn load_range(
    path: &Path,
    opts: &Options,
    range: Option<&str>,
) -> anyhow::Result<(vramscope_snapshot::Snapshot, Report)> {
    load_timeline(path, opts, range, Some(opts.device)).map(|(snap, r, _)| (snap, r))
}

/// [`load_range`] of `device` (None: the snapshot's default device),
/// keeping the timeline the report was made from.
fn load_timeline(
    path: &Path,
    opts: &Options,
    range: Option<&str>,
    device: Option<usize>,
) -> anyhow::Result<(vramscope_snapshot::Snapshot, Report, Timeline)> {
    // the timeline's pass over the whole trace, where it is decoded in
    // parallel, runs while the rest of the file is read
    let (snap, early) = if range.is_none() && opts.range.is_none() {
        read_early(path, opts.timeline_points)?
    } else {
        (read(path)?, None)
    };
    let mut opts = opts.clone();
    opts.device = device.unwrap_or_else(|| snap.default_device());
    if let Some(spec) = range {
        let empty = vramscope_snapshot::Trace::new();
        let trace = snap.device_traces.get(opts.device).unwrap_or(&empty);
        opts.range = Some(resolve_range(spec, trace)?);
    }
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let tl = timeline::build_window_early(
        &snap,
        opts.device,
        &cfg,
        opts.timeline_points,
        opts.range.clone(),
        early,
    );
    let mut r = analyze_timeline(&snap, &tl, &opts);
    r.snapshot = path.display().to_string();
    Ok((snap, r, tl))
}

/// Run `vramscope inspect`.
pub fn run(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let opts = Options {
        top: args.top,
        stacks: args.stacks,
        ..Options::default()
    };
    let (snap, report, tl) =
        load_timeline(&args.snapshot, &opts, args.range.as_deref(), args.device)?;
    if let Some(out) = &args.html {
        write_page(out, &snap, &tl, &report)?;
    }
    let s = if args.json {
        json::render(&report)
    } else {
        text::render(&report, args.stacks)
    };
    std::io::stdout().lock().write_all(s.as_bytes())?;
    Ok(ExitCode::from(EXIT_OK))
}

/// Write a snapshot's HTML report to `out` and nothing else: what
/// `inspect SNAPSHOT --html OUT` writes, without its text report on
/// stdout (`vramscope run --html`, whose stdout may be `--json -`'s),
/// titled `title` (the run's script) in place of the snapshot's path.
pub fn write_html(snapshot: &Path, out: &Path, title: Option<&str>) -> anyhow::Result<()> {
    let (snap, mut report, tl) = load_timeline(snapshot, &Options::default(), None, None)?;
    if let Some(title) = title {
        report.snapshot = title.to_owned();
    }
    write_page(out, &snap, &tl, &report)
}

/// The HTML page of `report` written to `out`.
fn write_page(
    out: &Path,
    snap: &vramscope_snapshot::Snapshot,
    tl: &Timeline,
    report: &Report,
) -> anyhow::Result<()> {
    // the page's bands come from the report's own timeline
    let page = html::render_snapshot_timeline(snap, tl, report);
    write_in_place(out, page.as_bytes()).with_context(|| format!("cannot write {}", out.display()))
}

/// Write `bytes` to `path` over what it held, then cut it to their length:
/// not truncated to zero first, since ext4 allocates a truncated file's
/// delayed blocks when it is closed (its `auto_da_alloc` mount option, on
/// by default: Linux commit afd4672), which cost milliseconds each time a
/// page was written over an earlier one. A path that is no regular file
/// (`/dev/stdout`) is only written.
fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    f.write_all(bytes)?;
    if f.metadata()?.is_file() {
        f.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

/// [`read`], with the timeline's pass made over a device's trace while the
/// rest of the file is read, under the allocator settings read ahead of
/// it (`timeline::build_window_early` takes it where they were right).
fn read_early(
    path: &Path,
    points: usize,
) -> anyhow::Result<(
    vramscope_snapshot::Snapshot,
    Option<(usize, timeline::EarlyPass)>,
)> {
    let pass = move |t: vramscope_snapshot::EarlyTrace| {
        let settings = vramscope_snapshot::Snapshot {
            allocator_settings: t.allocator_settings().cloned(),
            ..Default::default()
        };
        let (cfg, _) = vramscope_replay::from_snapshot::config(&settings);
        timeline::early_pass(t, cfg, points)
    };
    vramscope_snapshot::read_snapshot_file_early(path, pass).with_context(|| {
        format!(
            "{} is not a readable PyTorch memory snapshot",
            path.display()
        )
    })
}

/// Read a snapshot file, saying which file could not be read.
pub fn read(path: &Path) -> anyhow::Result<vramscope_snapshot::Snapshot> {
    vramscope_snapshot::read_snapshot_file(path).with_context(|| {
        format!(
            "{} is not a readable PyTorch memory snapshot",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_syntax() {
        assert_eq!(
            parse_range("10..20").unwrap(),
            (Some(End::Entry(10)), Some(End::Entry(20)))
        );
        assert_eq!(
            parse_range("2.5s..").unwrap(),
            (Some(End::Seconds(2.5)), None)
        );
        assert_eq!(
            parse_range("..4s").unwrap(),
            (None, Some(End::Seconds(4.0)))
        );
        for bad in ["10", "a..b", "-1s..2s", "1..2..3"] {
            let e = parse_range(bad).unwrap_err().to_string();
            assert!(e.contains("expected T0..T1"), "{bad}: {e}");
        }
        assert_eq!(partition_point(10, |i| i < 7), 7);
        assert_eq!(partition_point(0, |_| true), 0);
    }
}
