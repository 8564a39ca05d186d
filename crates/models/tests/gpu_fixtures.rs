//! Estimates against the GPU: every workload of `validation/hf_cases.json`
//! recorded on an H100 (`fixtures/estimate/NAME.json`, by
//! `validation/hf_cases.sh`) must be within issue #5's tolerance on every
//! phase: peak allocated within 0.5%, peak reserved within 2%.
//!
//! One test per family, so a family's state is visible at a glance;
//! `cargo test -p vramscope-models --test gpu_fixtures -- --nocapture` prints
//! each case's differences.

use vramscope_models::fixture::{self, Case};
use vramscope_models::{estimate, EstimateOptions};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/hf_cases.json")).unwrap();
    fixture::cases(&text).unwrap()
}

/// Run every case whose name starts with one of `prefixes`; panic listing
/// those outside the tolerance.
fn check(prefixes: &[&str]) {
    let mut bad = Vec::new();
    let mut n = 0;
    for case in cases() {
        if !prefixes.iter().any(|p| case.name.starts_with(p)) {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/{}.json", case.name))
            .unwrap();
        let rec = fixture::recorded(&text).unwrap();
        let opts = EstimateOptions {
            allocator: case.allocator.clone(),
            ..EstimateOptions::default()
        };
        match estimate(&rec.config, &case.workload, &opts) {
            Err(e) => bad.push(format!("{}: {e}", case.name)),
            Ok(est) => {
                let acc = fixture::compare(&est, &rec.phases);
                println!(
                    "{:<28} exact {:>2}/{:<2} peak alloc {:+.4}% reserved {:+.4}% | worst phase alloc {:.4}% reserved {:.4}%",
                    case.name,
                    acc.exact_phases,
                    acc.phases,
                    acc.peak_allocated * 100.0,
                    acc.peak_reserved * 100.0,
                    acc.worst_peak_allocated * 100.0,
                    acc.worst_peak_reserved * 100.0
                );
                for d in &acc.diffs {
                    println!("    {d}");
                }
                if !acc.acceptable() {
                    bad.push(format!(
                        "{}: worst phase peak allocated {:.3}%, peak reserved {:.3}%",
                        case.name,
                        acc.worst_peak_allocated * 100.0,
                        acc.worst_peak_reserved * 100.0
                    ));
                }
            }
        }
    }
    assert!(n > 0, "no case matches {prefixes:?}");
    assert!(bad.is_empty(), "outside the tolerance:\n{}", bad.join("\n"));
}

#[test]
fn llama() {
    check(&["llama_"]);
}

#[test]
fn mistral() {
    check(&["mistral_"]);
}

#[test]
fn qwen2() {
    check(&["qwen2_"]);
}

#[test]
fn qwen3() {
    check(&["qwen3_"]);
}

#[test]
fn phi3() {
    check(&["phi3_"]);
}

#[test]
fn gemma2() {
    check(&["gemma2_"]);
}

#[test]
fn gpt2() {
    check(&["gpt2_"]);
}

#[test]
fn bert() {
    check(&["bert_"]);
}

#[test]
fn roberta() {
    check(&["roberta_"]);
}

#[test]
fn vit() {
    check(&["vit_"]);
}
