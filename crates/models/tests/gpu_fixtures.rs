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

/// Cases outside issue #5's tolerance, with the bound on their worst
/// phase's allocated error, and why. The test fails if one comes back inside
/// (so the list cannot go stale) or goes past its bound.
///
/// - `gpt2_train_autocast_ckpt` (0.626% allocated in one phase): the
///   requests equal the GPU's except for the order in which leaving autocast
///   frees the cached weight casts (PyTorch keeps them in a hash map keyed by
///   CPU pointers, so the order follows CPU heap addresses) and the CUDA
///   driver's segment placement; which free blocks best fit picks then
///   differs. It went past 0.5% when `empty_like` started keeping a
///   non-dense input's stride order, as ATen's does (which made
///   `gpt2_train_bf16_sgd`'s trace identical to the GPU's).
const KNOWN_OUTSIDE: &[(&str, f64)] = &[("gpt2_train_autocast_ckpt", 0.0065)];

/// (case list, fixture directory): the workloads the twin was built
/// against, and those chosen and measured afterwards without changing the
/// twin (`validation/unseen_cases.json`, recorded on the H100; a first run
/// on an H200 gave the same figures in every phase).
const SETS: [(&str, &str); 2] = [
    ("validation/hf_cases.json", "fixtures/estimate"),
    ("validation/unseen_cases.json", "fixtures/estimate_unseen"),
];

fn cases() -> Vec<(Case, &'static str)> {
    SETS.iter()
        .flat_map(|(list, dir)| {
            let text = std::fs::read_to_string(format!("{ROOT}/{list}")).unwrap();
            fixture::cases(&text)
                .unwrap()
                .into_iter()
                .map(move |c| (c, *dir))
        })
        .collect()
}

/// Run every case whose name starts with one of `prefixes`; panic listing
/// those outside the tolerance.
fn check(prefixes: &[&str]) {
    let mut bad = Vec::new();
    let mut n = 0;
    for (case, dir) in cases() {
        if !prefixes.iter().any(|p| case.name.starts_with(p)) {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(format!("{ROOT}/{dir}/{}.json", case.name)).unwrap();
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
                let known = KNOWN_OUTSIDE.iter().find(|k| k.0 == case.name);
                if let Some((_, alloc_bound)) = known {
                    if acc.acceptable() {
                        bad.push(format!(
                            "{}: known to be outside the tolerance, now inside: take it off KNOWN_OUTSIDE",
                            case.name
                        ));
                    } else if acc.worst_peak_allocated > *alloc_bound
                        || acc.worst_peak_reserved > 0.02
                    {
                        bad.push(format!(
                            "{}: outside its known bound: worst phase peak allocated {:.3}%, peak reserved {:.3}%",
                            case.name,
                            acc.worst_peak_allocated * 100.0,
                            acc.worst_peak_reserved * 100.0
                        ));
                    }
                } else if !acc.acceptable() {
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

#[test]
fn unseen() {
    check(&["u_"]);
}
