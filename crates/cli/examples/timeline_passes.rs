//! Time `inspect`'s timeline pass alone, several times in one process, on
//! one snapshot file: each pass's wall time, this thread's CPU time and the
//! process's minor page faults, as one JSON line. The allocator is the
//! `vramscope` binary's (mimalloc); set `MIMALLOC_PURGE_DELAY=0` to free as
//! `inspect` does (it runs again with it set: `src/main.rs`).
//!
//! ```text
//! cargo build --release -p vramscope --example timeline_passes
//! MIMALLOC_PURGE_DELAY=0 target/release/examples/timeline_passes FILE [PASSES]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use vramscope_report::{timeline, Options};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// This thread's CPU time in ms (`/proc/thread-self/schedstat`'s first
/// field, in ns), 0 where it cannot be read.
fn thread_cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e6)
}

/// The process's minor page faults (`/proc/self/stat`'s tenth field), 0
/// where it cannot be read.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: timeline_passes FILE [PASSES]");
        return ExitCode::FAILURE;
    };
    let passes: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let snap = match vramscope_snapshot::read_snapshot_file(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let opts = Options::default();
    let (mut wall, mut cpu, mut faults) = (Vec::new(), Vec::new(), Vec::new());
    let mut allocations = 0;
    for _ in 0..passes {
        let (c, f) = (thread_cpu_ms(), minor_faults());
        let t = Instant::now();
        let tl = timeline::build(&snap, opts.device, &cfg, opts.timeline_points);
        wall.push(format!("{:.2}", t.elapsed().as_secs_f64() * 1e3));
        cpu.push(format!("{:.2}", thread_cpu_ms() - c));
        faults.push((minor_faults() - f).to_string());
        allocations = tl.num_allocations();
    }
    println!(
        "{{\"file\": \"{path}\", \"entries\": {}, \"allocations\": {allocations}, \"wall_ms\": [{}], \"cpu_ms\": [{}], \"minflt\": [{}]}}",
        snap.trace_len(),
        wall.join(", "),
        cpu.join(", "),
        faults.join(", ")
    );
    ExitCode::SUCCESS
}
