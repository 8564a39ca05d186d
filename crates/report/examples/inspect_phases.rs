//! Time the phases of `vramscope inspect --json` on one file: reading,
//! the timeline passes, the rest of the analysis, rendering.
//!
//! ```text
//! cargo run --release -p vramscope-report --example inspect_phases -- FILE
//! ```

use std::process::ExitCode;
use std::time::Instant;

use vramscope_report::{analysis, json, timeline, Options};

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: inspect_phases FILE");
        return ExitCode::FAILURE;
    };
    let t = Instant::now();
    let snap = match vramscope_snapshot::read_snapshot_file(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let read = t.elapsed().as_secs_f64();
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let opts = Options::default();
    let t = Instant::now();
    let tl = timeline::build(&snap, opts.device, &cfg, opts.timeline_points);
    let passes = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let report = analysis::analyze_timeline(&snap, &tl, &opts);
    let rest = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = json::render(&report);
    let render = t.elapsed().as_secs_f64();
    println!(
        "{} trace entries, {} allocations: read {read:.3} s, timeline {passes:.3} s, analysis {rest:.3} s, JSON {render:.3} s ({} bytes)",
        snap.trace_len(),
        tl.num_allocations(),
        out.len()
    );
    ExitCode::SUCCESS
}
