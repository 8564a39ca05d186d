//! Compare the twin's allocations with the GPU's, one by one, for a case of
//! `validation/hf_cases.json`:
//!
//! ```text
//! mkdir -p /tmp/hf && tar xJf fixtures/estimate/traces.tar.xz -C /tmp/hf
//! cargo run -q --release -p vramscope-models --example trace_diff -- CASE [/tmp/hf] [--all]
//! ```
//!
//! Prints the per-phase figures of both, then the allocation sequences side
//! by side (size, then the twin's op and module, the GPU's innermost Python
//! frames) from a little before the first differing size (`--all`: all).

use serde_json::Value;
use vramscope_engine::MemEvent;
use vramscope_models::{estimate, EstimateOptions};
use vramscope_testkit::fixture;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args
        .first()
        .expect("usage: trace_diff CASE [TRACE_DIR] [--all]");
    let dir = args
        .get(1)
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "/tmp/hf".into());
    let all = args.iter().any(|a| a == "--all");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cases = fixture::cases(
        &std::fs::read_to_string(format!("{root}/validation/hf_cases.json")).unwrap(),
    )
    .unwrap();
    let case = cases
        .iter()
        .find(|c| &c.name == name)
        .expect("no such case");
    let rec = fixture::recorded(
        &std::fs::read_to_string(format!("{root}/fixtures/estimate/{name}.json")).unwrap(),
    )
    .unwrap();
    let opts = EstimateOptions {
        allocator: case.allocator.clone(),
        ..EstimateOptions::default()
    };
    let est = match estimate(&rec.config, &case.workload, &opts) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("estimate failed: {e}");
            std::process::exit(1);
        }
    };
    let acc = fixture::compare(&est, &rec.phases);
    println!("phase        twin alloc/peak/reserved/peak_res  |  gpu");
    for (i, g) in rec.phases.iter().enumerate() {
        if let Some(t) = est.phases.get(i) {
            let mark = if t == g { " " } else { "*" };
            println!(
                "{mark}{:<11} {:>11} {:>11} {:>11} {:>11} | {:>11} {:>11} {:>11} {:>11}",
                g.name,
                t.allocated_bytes,
                t.peak_allocated_bytes,
                t.reserved_bytes,
                t.peak_reserved_bytes,
                g.allocated_bytes,
                g.peak_allocated_bytes,
                g.reserved_bytes,
                g.peak_reserved_bytes
            );
        }
    }
    println!(
        "exact phases {}/{}; peak alloc {:+.4}%, reserved {:+.4}%",
        acc.exact_phases,
        acc.phases,
        acc.peak_allocated * 100.0,
        acc.peak_reserved * 100.0
    );
    // allocation sequences
    let twin: Vec<(u64, String)> = est
        .events
        .events
        .iter()
        .filter_map(|e| match e {
            MemEvent::Alloc(r) => {
                Some((r.bytes, format!("{} [{}] {}", r.op, r.module, r.category)))
            }
            _ => None,
        })
        .collect();
    let trace: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/{name}.trace.json"))
            .expect("extract fixtures/estimate/traces.tar.xz into the trace dir first"),
    )
    .unwrap();
    let gpu: Vec<(u64, String)> = trace
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e[0] == "alloc")
        .map(|e| {
            let frames: Vec<String> = e[4]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (e[2].as_u64().unwrap_or(0), frames.join(" < "))
        })
        .collect();
    let first = twin
        .iter()
        .zip(&gpu)
        .position(|(a, b)| a.0 != b.0)
        .unwrap_or(twin.len().min(gpu.len()));
    println!(
        "allocations: twin {}, gpu {}; first differing size at #{first}",
        twin.len(),
        gpu.len()
    );
    let (from, to) = if all {
        (0, twin.len().max(gpu.len()))
    } else {
        (
            first.saturating_sub(8),
            (first + 25).min(twin.len().max(gpu.len())),
        )
    };
    for i in from..to {
        let t = twin.get(i);
        let g = gpu.get(i);
        let mark = if t.map(|x| x.0) == g.map(|x| x.0) {
            " "
        } else {
            "*"
        };
        println!(
            "{mark}{i:>6} {:>11} {:<60} | {:>11} {}",
            t.map(|x| x.0.to_string()).unwrap_or_default(),
            t.map(|x| x.1.as_str()).unwrap_or(""),
            g.map(|x| x.0.to_string()).unwrap_or_default(),
            g.map(|x| x.1.as_str()).unwrap_or("")
        );
    }
}
