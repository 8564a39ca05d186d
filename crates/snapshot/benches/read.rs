//! How fast a snapshot is read (issue #36: `inspect` 10× faster than
//! `pickle.load`, and the reader is most of it).
//!
//! `cargo bench -p vramscope-snapshot` (BENCH_RUNS=N to change the
//! repetitions; BENCH_SNAPSHOTS="a.pickle b.pickle" to time real files too,
//! e.g. the nanoGPT snapshots of `fixtures/snapshot_real/README.md`).
//! Synthetic snapshots (`vramscope_testkit::synth`, shaped like real ones:
//! complete, and wrapped with 3 streams and expandable segments) are
//! written in memory first. Each figure is the median and the minimum of N
//! single-threaded runs in this process of:
//! - `read_snapshot`: the whole reader (decoding with trace entries taken
//!   over as they are decoded, then the conversion);
//! - `pickle::parse` and `pickle::parse_stepwise`: generic decoding with a
//!   trace entry's dict decoded in one step, and every opcode one by one
//!   (the same result; the difference is what the one step saves);
//! - for files, `read_snapshot_file` (its reading thread included).

use std::hint::black_box;
use std::time::Instant;

use vramscope_snapshot::write::{snapshot_to_bytes, WriteOptions};
use vramscope_snapshot::{pickle, read_snapshot, read_snapshot_file};
use vramscope_testkit::synth::{generate, Options};

fn time(label: &str, runs: usize, bytes: usize, entries: usize, mut f: impl FnMut()) {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let s = Instant::now();
        f();
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(|a, b| a.total_cmp(b));
    let med = t[t.len() / 2];
    println!(
        "{label:<44} median {:>8.2} ms  min {:>8.2} ms  ({:.0} MB/s, {:.2} M entries/s)",
        med * 1e3,
        t[0] * 1e3,
        bytes as f64 / med / 1e6,
        entries as f64 / med / 1e6
    );
}

/// `read_snapshot`, `pickle::parse` and `pickle::parse_stepwise` of
/// `bytes` (a snapshot of `entries` entries).
fn decoders(name: &str, runs: usize, bytes: &[u8], entries: usize) {
    let n = bytes.len();
    time(&format!("{name} read_snapshot"), runs, n, entries, || {
        black_box(read_snapshot(bytes).expect("it reads"));
    });
    time(&format!("{name} pickle::parse"), runs, n, entries, || {
        black_box(pickle::parse(bytes).expect("it decodes"));
    });
    let label = format!("{name} pickle::parse_stepwise");
    time(&label, runs, n, entries, || {
        black_box(pickle::parse_stepwise(bytes).expect("it decodes"));
    });
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let wrapped = Options {
        max_entries: Some(300_000),
        streams: 3,
        conf: "expandable_segments:True".into(),
        entries: 600_000,
        ..Options::default()
    };
    let complete = Options {
        entries: 300_000,
        ..Options::default()
    };
    let opts = WriteOptions {
        share_contexts: true,
        ..WriteOptions::default()
    };
    for (name, o) in [("complete", complete), ("wrapped", wrapped)] {
        let snap = generate(&o).expect("a valid configuration").snapshot;
        let bytes = snapshot_to_bytes(&snap, &opts);
        let (n, e) = (bytes.len(), snap.trace_len());
        println!("synthetic {name}: {:.1} MB, {e} entries", n as f64 / 1e6);
        decoders(name, runs, &bytes, e);
    }
    let files = std::env::var("BENCH_SNAPSHOTS").unwrap_or_default();
    for path in files.split_whitespace() {
        let Ok(bytes) = std::fs::read(path) else {
            println!("{path}: cannot be read, skipped");
            continue;
        };
        let e = match read_snapshot(&bytes) {
            Ok(s) => s.trace_len(),
            Err(err) => {
                println!("{path}: {err}, skipped");
                continue;
            }
        };
        let n = bytes.len();
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.into(), |f| f.to_string_lossy());
        println!("{path}: {:.1} MB, {e} entries", n as f64 / 1e6);
        time(&format!("{name} read_snapshot_file"), runs, n, e, || {
            black_box(read_snapshot_file(path).expect("it reads"));
        });
        decoders(&name, runs, &bytes, e);
    }
}
