//! The largest batch against the GPU: `validation/plan_bisect.py` found the
//! real largest batch of each workload of `validation/plan_cases.json` on an
//! H100 (a fresh process per try under `set_per_process_memory_fraction`,
//! recorded in `fixtures/plan/plan_h100.jsonl`); the planner must find the
//! same number for every one.

use serde_json::Value;
use vramscope_models::fixture;
use vramscope_models::EstimateOptions;
use vramscope_planner::max_batch;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Workloads where the twin is known to differ, and why. Each must still
/// differ (so the list cannot go stale silently) and be within a bound.
///
/// - `vit_train_bf16_ckpt_sgdm`: at batch 187 the H100 releases its cache in
///   `step0` (peak reserved 497 MB there) because a free block it needs lies
///   in another segment than in the twin: the CUDA driver placed a later
///   20 MiB segment below an earlier one, and best fit breaks ties between
///   equal-size blocks by address. The twin's simulated device hands out
///   increasing addresses; the driver's placement is not modelled, so the twin
///   finds 216 where the GPU finds 187.
const KNOWN: &[(&str, i64)] = &[("vit_train_bf16_ckpt_sgdm", 216)];

/// Bisect every workload of `plan` (a jsonl of `plan_bisect.py`) whose
/// cases are in `list` with fixtures in `dir`; returns (workloads, exact,
/// problems).
fn check(list: &str, plan: &str, dir: &str) -> (usize, usize, Vec<String>) {
    let cases =
        fixture::cases(&std::fs::read_to_string(format!("{ROOT}/{list}")).unwrap()).unwrap();
    let text = std::fs::read_to_string(format!("{ROOT}/{plan}")).unwrap();
    let mut n = 0;
    let mut exact = 0;
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let name = v["name"].as_str().unwrap();
        let case_name = v["case"].as_str().unwrap();
        let limit = v["limit_bytes"].as_u64().unwrap();
        let gpu_max = v["max_batch"].as_i64().unwrap();
        let case = cases.iter().find(|c| c.name == case_name).unwrap();
        let rec = fixture::recorded(
            &std::fs::read_to_string(format!("{ROOT}/{dir}/{case_name}.json")).unwrap(),
        )
        .unwrap();
        let mut opts = EstimateOptions {
            allocator: case.allocator.clone(),
            ..EstimateOptions::default()
        };
        // exactly the script's set_per_process_memory_fraction(limit / total)
        opts.memory_fraction = Some(limit as f64 / opts.profile.total_memory as f64);
        n += 1;
        match max_batch(&rec.config, &case.workload, &opts, &mut |_| {}) {
            Ok(mb) => {
                println!("{name:<28} twin {:>4}  gpu {gpu_max:>4}", mb.max_batch);
                match KNOWN.iter().find(|(k, _)| *k == name) {
                    Some((_, twin)) => {
                        if mb.max_batch != *twin {
                            bad.push(format!(
                                "{name}: known divergence changed: twin {} (was {twin}), gpu {gpu_max}",
                                mb.max_batch
                            ));
                        }
                    }
                    None => {
                        if mb.max_batch != gpu_max {
                            bad.push(format!("{name}: twin {} gpu {gpu_max}", mb.max_batch));
                        } else {
                            exact += 1;
                        }
                    }
                }
            }
            Err(e) => bad.push(format!("{name}: {e}")),
        }
    }
    println!("{exact} of {n} workloads: the twin's largest batch equals the GPU's");
    (n, exact, bad)
}

#[test]
fn largest_batch_equals_the_gpu() {
    let (n, _, bad) = check(
        "validation/hf_cases.json",
        "fixtures/plan/plan_h100.jsonl",
        "fixtures/estimate",
    );
    assert!(n >= 8, "only {n} workloads in the fixture");
    assert!(bad.is_empty(), "largest batch differs:\n{}", bad.join("\n"));
}

/// Workloads chosen and bisected after the planner was written, without
/// changing it (`validation/unseen_plan_cases.json`, on the H100; a first
/// run on an H200 found the same three numbers).
#[test]
fn largest_batch_equals_the_gpu_on_unseen_workloads() {
    let (n, _, bad) = check(
        "validation/unseen_cases.json",
        "fixtures/plan/unseen_plan_h100.jsonl",
        "fixtures/estimate_unseen",
    );
    assert_eq!(n, 3);
    assert!(bad.is_empty(), "largest batch differs:\n{}", bad.join("\n"));
}

/// `validation/plan_repeat.py` tried ViT around its boundary 4 times each
/// in fresh processes with ASLR on, and twice with it off
/// (`fixtures/plan/vit_repeat_h100.jsonl`): the GPU gives the same verdict
/// and the same peaks every time, so its placement is not random here, and
/// its verdict is not monotone in the batch (200 fits between failures at
/// 188 and 208). The twin fits at every one of these batches up to 216, on
/// its increasing addresses and on the driver's kernel-free placement rule
/// alike: the verdicts that differ are pinned here, so a change either way
/// is seen.
#[test]
fn vit_verdicts_near_its_boundary() {
    let text =
        std::fs::read_to_string(format!("{ROOT}/fixtures/plan/vit_repeat_h100.jsonl")).unwrap();
    let mut gpu: std::collections::BTreeMap<i64, std::collections::BTreeSet<(bool, String)>> =
        Default::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let peaks = v["peak_reserved"].to_string();
        gpu.entry(v["batch"].as_i64().unwrap())
            .or_default()
            .insert((v["rc"].as_i64() == Some(0), peaks));
    }
    let cases = fixture::cases(
        &std::fs::read_to_string(format!("{ROOT}/validation/hf_cases.json")).unwrap(),
    )
    .unwrap();
    let case = cases
        .iter()
        .find(|c| c.name == "vit_train_bf16_ckpt_sgdm")
        .unwrap();
    let rec = fixture::recorded(
        &std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/{}.json", case.name)).unwrap(),
    )
    .unwrap();
    let mut opts = EstimateOptions {
        allocator: case.allocator.clone(),
        ..EstimateOptions::default()
    };
    opts.memory_fraction = Some(1073741824.0 / opts.profile.total_memory as f64);
    let mut differ = Vec::new();
    for (batch, outcomes) in &gpu {
        // deterministic: one verdict, one set of peaks
        assert_eq!(outcomes.len(), 1, "batch {batch}: {outcomes:?}");
        let gpu_fits = outcomes.iter().next().unwrap().0;
        let (t, _) =
            vramscope_planner::try_batch(&rec.config, &case.workload, *batch, &opts).unwrap();
        println!("batch {batch}: gpu fits {gpu_fits}, twin fits {}", t.fits);
        if t.fits != gpu_fits {
            differ.push(*batch);
        }
    }
    assert_eq!(differ, vec![188, 192, 208, 216]);
}
