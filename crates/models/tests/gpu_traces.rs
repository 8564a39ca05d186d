//! The predicted allocator trace against the GPU's, entry by entry.
//!
//! `validation/hf_cases.sh` keeps each H100 run's trace
//! (`torch.cuda.memory._snapshot()["device_traces"]`: action, address, size,
//! stream, frames) in `fixtures/estimate/traces.tgz`. The twin's trace, the
//! one `vramscope estimate --snapshot` writes, must list the same actions
//! with the same sizes in the same order. Addresses are not compared: the
//! simulated device does not place segments where the CUDA driver does.
//!
//! The cases whose traces still differ are named below; the test fails if
//! the list changes either way, so a fix or a regression is seen.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use vramscope_models::fixture;
use vramscope_models::{estimate, EstimateOptions};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Cases whose recorded trace differs from the twin's (each still within
/// issue #5's tolerance on the per-phase figures; see `gpu_fixtures`). None
/// differs in its requests: with `segment_*` entries left out and the frees
/// between two allocations taken as a set, all five equal the GPU's.
/// - segment placement (the CUDA driver maps some later segments at lower
///   addresses, and best fit breaks ties between equal-size blocks by
///   address): `gemma2_train_bf16`, `llama_gqa_train_bf16`,
///   `gpt2_train_autocast_ckpt` (a reuse where the twin maps a segment);
/// - the order in which leaving `torch.autocast` frees the cached weight
///   casts (`clear_autocast_cache` clears a `ska::flat_hash_map` keyed by
///   `TensorImpl*`, so the order follows CPU heap addresses):
///   `gpt2_train_autocast_ckpt`, `qwen2_train_autocast_sgdm`,
///   `roberta_train_autocast`.
const KNOWN_DIFFERENT: [&str; 5] = [
    "gemma2_train_bf16",
    "gpt2_train_autocast_ckpt",
    "llama_gqa_train_bf16",
    "qwen2_train_autocast_sgdm",
    "roberta_train_autocast",
];

fn traces_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let status = Command::new("tar")
        .arg("xzf")
        .arg(format!("{ROOT}/fixtures/estimate/traces.tgz"))
        .arg("-C")
        .arg(&dir)
        .status()
        .expect("tar runs");
    assert!(status.success(), "extracting traces.tgz");
    dir
}

#[test]
fn predicted_traces_equal_the_gpus() {
    let dir = traces_dir();
    let text = std::fs::read_to_string(format!("{ROOT}/validation/hf_cases.json")).unwrap();
    let mut different = Vec::new();
    let mut same = 0;
    for case in fixture::cases(&text).unwrap() {
        let rec = fixture::recorded(
            &std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/{}.json", case.name))
                .unwrap(),
        )
        .unwrap();
        let gpu: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{}.trace.json", case.name))).unwrap(),
        )
        .unwrap();
        let gpu: Vec<(String, u64)> = gpu
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[0].as_str().unwrap().to_owned(), e[2].as_u64().unwrap()))
            .collect();
        let opts = EstimateOptions {
            allocator: case.allocator.clone(),
            record_trace: true,
            ..EstimateOptions::default()
        };
        let est = estimate(&rec.config, &case.workload, &opts).unwrap();
        let twin: Vec<(String, u64)> = est
            .recorded
            .unwrap()
            .trace
            .iter()
            .map(|e| (e.action.as_str().to_owned(), e.size))
            .collect();
        match gpu.iter().zip(&twin).position(|(g, t)| g != t) {
            None if gpu.len() == twin.len() => {
                same += 1;
                println!("{:<28} {:>6} entries, identical", case.name, gpu.len());
            }
            at => {
                let at = at.unwrap_or(gpu.len().min(twin.len()));
                println!(
                    "{:<28} gpu {:>6} twin {:>6} entries; first difference at {at}: gpu {:?} twin {:?}",
                    case.name,
                    gpu.len(),
                    twin.len(),
                    gpu.get(at),
                    twin.get(at)
                );
                different.push(case.name.clone());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("{same} of {} traces identical", same + different.len());
    different.sort();
    assert_eq!(
        different, KNOWN_DIFFERENT,
        "the cases whose traces differ changed"
    );
}
