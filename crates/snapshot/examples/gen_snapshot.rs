//! Write a synthetic but realistic `torch.cuda.memory._dump_snapshot` pickle
//! (see `vramscope_testkit::synth`: a transformer trained through the
//! allocator twin, so the trace is self-consistent and replays exactly).
//!
//! ```text
//! cargo run --release -p vramscope-snapshot --example gen_snapshot -- \
//!     --entries 1000000 --out /tmp/synthetic.pickle [--seed 1] [--devices 1] \
//!     [--no-frames] [--conf expandable_segments:True] \
//!     [--max-entries N] [--streams S]      # a wrapped ring buffer; side streams
//!     [--empty-at 0,3]     # empty traces inserted at these device indices
//! cargo run --release -p vramscope-snapshot --example gen_snapshot -- \
//!     --rewrite real.pickle --out copy.pickle      # read a snapshot and write it back
//! ```
//!
//! It prints the twin's `memory_stats()` peaks, which `vramscope inspect`
//! must find again.

use std::process::ExitCode;

use vramscope_snapshot::write::{write_snapshot_file, WriteOptions};
use vramscope_snapshot::*;
use vramscope_testkit::synth::{generate, Options};

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut opts = Options::default();
    let (mut out, mut rewrite) = (None, None);
    let mut empty_at: Vec<usize> = Vec::new();
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--entries" => opts.entries = val()?.parse().map_err(|e| format!("--entries: {e}"))?,
            "--out" => out = Some(val()?),
            "--seed" => opts.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--devices" => opts.devices = val()?.parse().map_err(|e| format!("--devices: {e}"))?,
            "--conf" => opts.conf = val()?,
            "--max-entries" => {
                opts.max_entries = Some(val()?.parse().map_err(|e| format!("--max-entries: {e}"))?)
            }
            "--streams" => opts.streams = val()?.parse().map_err(|e| format!("--streams: {e}"))?,
            "--rewrite" => rewrite = Some(val()?),
            "--empty-at" => {
                empty_at = val()?
                    .split(',')
                    .map(|k| k.trim().parse().map_err(|e| format!("--empty-at: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--no-frames" => opts.frames = false,
            "-h" | "--help" => {
                println!("gen_snapshot --entries N --out FILE [--seed S] [--devices D] [--no-frames] [--conf PYTORCH_CUDA_ALLOC_CONF] [--max-entries N] [--streams S] [--empty-at K,...]\ngen_snapshot --rewrite IN --out FILE");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let out = out.ok_or("--out FILE is required")?;
    let (mut snap, peaks) = match rewrite {
        Some(input) => (
            read_snapshot_file(&input).map_err(|e| e.to_string())?,
            Vec::new(),
        ),
        None => {
            let s = generate(&opts)?;
            (s.snapshot, s.peaks)
        }
    };
    // (a multi-GPU host's snapshot lists every device, busy or not; the
    // segments move with their device's trace)
    empty_at.sort_unstable();
    empty_at.dedup();
    let mut moved: Vec<usize> = (0..snap.device_traces.len()).collect();
    for &k in &empty_at {
        if k > snap.device_traces.len() {
            return Err(format!("--empty-at {k}: past the devices' end"));
        }
        snap.device_traces.insert(k, Trace::new());
        for d in moved.iter_mut().filter(|d| **d >= k) {
            *d += 1;
        }
    }
    for seg in &mut snap.segments {
        if let Some(&d) = usize::try_from(seg.device).ok().and_then(|d| moved.get(d)) {
            seg.device = d as i64;
        }
    }
    let wopts = WriteOptions {
        share_contexts: true,
        ..WriteOptions::default()
    };
    write_snapshot_file(&snap, &out, &wopts).map_err(|e| e.to_string())?;
    let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {out}: {len} bytes, {} segments, {} trace entries, {} distinct stacks, {} distinct frames",
        snap.segments.len(),
        snap.trace_len(),
        snap.stacks.num_stacks(),
        snap.stacks.num_frames()
    );
    for (d, (a, ac, r)) in peaks.iter().enumerate() {
        let d = moved.get(d).copied().unwrap_or(d);
        eprintln!(
            "device {d}: the allocator twin's peaks: allocated {a}, active {ac}, reserved {r}"
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}
