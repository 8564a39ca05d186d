//! Time the checks made before decoding (frame headers, then every opcode
//! lexed on all cores), alone:
//!
//! ```text
//! cargo run --release -p vramscope-snapshot --example lex_file -- FILE [PIECE_BYTES]
//! ```
//!
//! PIECE_BYTES: the pieces the file is cut into (default: the reader's).

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: lex_file FILE");
        return ExitCode::FAILURE;
    };
    let piece = std::env::args().nth(2).and_then(|p| p.parse().ok());
    let t = Instant::now();
    let r = vramscope_snapshot::check_file(&path, piece);
    let s = t.elapsed().as_secs_f64();
    match r {
        Ok(()) => {
            println!("{path}: no error found before decoding, in {s:.3} s");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e} (found in {s:.3} s)");
            ExitCode::FAILURE
        }
    }
}
