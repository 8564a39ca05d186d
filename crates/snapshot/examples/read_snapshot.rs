//! Read a snapshot and print a summary (used for timing the reader).
//!
//! ```text
//! cargo run --release -p vramscope-snapshot --example read_snapshot -- FILE
//! ```

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: read_snapshot FILE");
        return ExitCode::FAILURE;
    };
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
