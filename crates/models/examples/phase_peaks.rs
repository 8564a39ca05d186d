//! Print the twin's per-phase figures of a case of `validation/hf_cases.json`
//! at other batch sizes (unlimited device):
//! `cargo run -q --release -p vramscope-models --example phase_peaks -- CASE B1 [B2 ...]`
use vramscope_models::{estimate, EstimateOptions, Workload};
use vramscope_testkit::fixture;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cases = fixture::cases(
        &std::fs::read_to_string(format!("{root}/validation/hf_cases.json")).expect("cases"),
    )
    .expect("cases");
    let case = cases
        .iter()
        .find(|c| c.name == args[0])
        .expect("no such case");
    let rec = fixture::recorded(
        &std::fs::read_to_string(format!("{root}/fixtures/estimate/{}.json", case.name))
            .expect("fixture"),
    )
    .expect("fixture");
    let opts = EstimateOptions {
        allocator: case.allocator.clone(),
        unlimited: std::env::var("LIMITED").is_err(),
        memory_fraction: std::env::var("LIMITED")
            .ok()
            .map(|s| s.parse::<f64>().unwrap() / 85017493504.0),
        ..EstimateOptions::default()
    };
    for b in &args[1..] {
        let b: i64 = b.parse().expect("batch");
        let w = Workload {
            batch: b,
            ..case.workload.clone()
        };
        match estimate(&rec.config, &w, &opts) {
            Ok(e) => {
                let peaks: Vec<String> = e
                    .phases
                    .iter()
                    .map(|p| format!("{}={}", p.name, p.peak_reserved_bytes))
                    .collect();
                println!(
                    "batch {b}: peak {} | {}",
                    e.peak_allocated_bytes,
                    peaks.join(" ")
                );
            }
            Err(err) => println!("batch {b}: {err}"),
        }
    }
}
