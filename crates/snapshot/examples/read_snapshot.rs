//! Read a snapshot and print a summary (used for timing the reader).
//!
//! ```text
//! cargo run --release -p vramscope-snapshot --example read_snapshot -- FILE
//! cargo run --release -p vramscope-snapshot --example read_snapshot -- FILE --split
//! cargo run --release -p vramscope-snapshot --example read_snapshot -- FILE --par
//! ```
//!
//! `--split`: one JSON line, the parallel decoder alone on all cores
//! (`read_file_parallel`: seconds, and whether it gave up) and then the
//! sequential reader alone on the file's bytes (`read_snapshot_sequential`).
//! `--par`: the parallel decoder alone on all cores, nothing else (for
//! its peak RSS); fails where it gives up.

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: read_snapshot FILE");
        return ExitCode::FAILURE;
    };
    if std::env::args().nth(2).as_deref() == Some("--par") {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let t = Instant::now();
        let s = match vramscope_snapshot::read_file_parallel(&path, threads) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                eprintln!("{path}: {e} ({:.4} s)", t.elapsed().as_secs_f64());
                return ExitCode::FAILURE;
            }
            None => {
                eprintln!("{path}: the parallel decoder gave up");
                return ExitCode::FAILURE;
            }
        };
        println!(
            "{} trace entries, parallel on {threads} threads in {:.4} s",
            s.trace_len(),
            t.elapsed().as_secs_f64()
        );
        return ExitCode::SUCCESS;
    }
    if std::env::args().nth(2).as_deref() == Some("--split") {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let t = Instant::now();
        let par = vramscope_snapshot::read_file_parallel(&path, threads);
        let par_s = t.elapsed().as_secs_f64();
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("cannot read {path}");
            return ExitCode::FAILURE;
        };
        let t = Instant::now();
        let seq = vramscope_snapshot::read_snapshot_sequential(&bytes);
        let seq_s = t.elapsed().as_secs_f64();
        println!(
            "{{\"label\": \"split {path}\", \"threads\": {threads}, \"parallel_s\": {par_s:.4}, \"parallel_gave_up\": {}, \"sequential_in_memory_s\": {seq_s:.4}, \"same_entries\": {}}}",
            par.is_none(),
            match (&par, &seq) {
                (Some(Ok(p)), Ok(s)) => p.device_traces == s.device_traces,
                _ => false,
            }
        );
        return ExitCode::SUCCESS;
    }
    let t = Instant::now();
    match vramscope_snapshot::read_snapshot_file(&path) {
        Ok(s) => {
            println!(
                "{} segments, {} trace entries on {} device(s), {} distinct stacks, {} distinct frames, read in {:.3} s",
                s.segments.len(),
                s.trace_len(),
                s.device_traces.len(),
                s.stacks.num_stacks(),
                s.stacks.num_frames(),
                t.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}
