//! Time the viewer's endpoints over HTTP on one snapshot (a benchmark, not
//! a test; docs/inspect-speed.md has the figures):
//!
//! ```text
//! cargo run --release -p vramscope-view --example endpoints -- FILE.pickle [REPS]
//! ```
//!
//! Prints the time to read and analyse the file, then for each request the
//! fastest and slowest of REPS (default 3) answers and the answer's size.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use vramscope_report::explore::Explorer;
use vramscope_report::Options;
use vramscope_view::Viewer;

/// GET `path` from `host:port`; the answer's body length.
fn get(addr: &str, path: &str) -> usize {
    let mut s = TcpStream::connect(addr).expect("the viewer listens");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let head = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |p| p + 4);
    assert!(
        buf.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&buf[..head])
    );
    buf.len() - head
}

fn main() {
    let mut args = std::env::args().skip(1);
    let file = args.next().expect("usage: endpoints FILE.pickle [REPS]");
    let reps: usize = args
        .next()
        .map_or(3, |r| r.parse().expect("REPS: a number"));
    let t = Instant::now();
    let snap = vramscope_snapshot::read_snapshot_file(&file).expect("a readable snapshot");
    let read = t.elapsed();
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let x = Explorer::new(snap, cfg, Options::default(), &file);
    let ready = t.elapsed();
    let r = x.report().clone();
    let n = r.trace_entries;
    let pk = r.peak_trace_index.unwrap_or(0);
    let site = r
        .live_at_peak
        .sites
        .first()
        .map_or("train".to_owned(), |s| {
            s.site.split(':').next().unwrap_or("").to_owned()
        });
    let q = site.rsplit('/').next().unwrap_or("").to_owned();
    println!(
        "{file}: {n} trace entries; read {:.2} s, ready (read + analysed) {:.2} s",
        read.as_secs_f64(),
        ready.as_secs_f64()
    );
    let (url, stop, h) = Viewer::bind(x, 0).unwrap().spawn();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let paths = [
        "/".to_owned(),
        "/api/report".to_owned(),
        format!("/api/range?from=0&to={n}&points=1270"),
        format!(
            "/api/range?from={}&to={}&points=1270",
            n / 2 - 50_000,
            n / 2 + 50_000
        ),
        format!(
            "/api/range?from={}&to={}&points=1270",
            n / 2 - 50,
            n / 2 + 50
        ),
        format!(
            "/api/range?from={}&to={}&points=1270",
            pk.saturating_sub(50),
            pk + 50
        ),
        format!("/api/at?i={pk}"),
        format!("/api/at?i={}", n / 2),
        format!("/api/state?i={pk}"),
        format!("/api/state?i={}", n / 2),
        format!("/api/search?q={q}"),
    ];
    println!("| request | fastest | slowest | answer |\n|---|---|---|---|");
    for p in &paths {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..reps {
            let t = Instant::now();
            bytes = get(&addr, p);
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        println!(
            "| `{p}` | {:.3} s | {:.3} s | {:.1} kB |",
            times[0],
            times[times.len() - 1],
            bytes as f64 / 1e3
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    h.join().unwrap();
}
