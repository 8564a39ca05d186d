//! `vramscope estimate --snapshot/--html`: the predicted run as a PyTorch
//! memory snapshot, read back by `vramscope inspect`.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-predicted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The workload of `fixtures/predicted/gpt2_train_b1_s64.pickle`.
const GPT2: [&str; 11] = [
    "estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64", "--steps", "1",
];

#[test]
fn inspect_reads_the_predicted_run_with_the_estimates_peaks() {
    let pickle = temp("gpt2.pickle");
    let html = temp("gpt2.html");
    let mut args = GPT2.to_vec();
    args.extend(["--json", "--snapshot", pickle.to_str().unwrap()]);
    args.extend(["--html", html.to_str().unwrap()]);
    let out = vramscope(&args);
    assert_eq!(out.status.code(), Some(0));
    let est = json(&out);
    let out = vramscope(&["inspect", pickle.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    assert_eq!(r["peak_allocated_bytes"], est["peak_allocated_bytes"]);
    assert_eq!(r["peak_reserved_bytes"], est["peak_reserved_bytes"]);
    let last = est["phases"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(r["final_allocated_bytes"], last["allocated_bytes"]);
    // and `vramscope replay` finds the allocator twin doing exactly what the
    // snapshot records (exit 0: every segment action and final block)
    let out = vramscope(&["replay", pickle.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") || page.starts_with("<!doctype html>"));
    assert!(page.contains("predicted: gpt2 train batch 1 seq 64"));
    assert!(!page.contains("http://") && !page.contains("https://"));

    // the checked-in sample is what the twin writes today (regenerate with
    // VRAMSCOPE_BLESS=1 when the twin changes)
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/predicted/gpt2_train_b1_s64.pickle");
    let now = std::fs::read(&pickle).unwrap();
    if std::env::var_os("VRAMSCOPE_BLESS").is_some() {
        std::fs::write(&golden, &now).unwrap();
    }
    assert!(
        std::fs::read(&golden).unwrap() == now,
        "fixtures/predicted/gpt2_train_b1_s64.pickle is stale: rerun with VRAMSCOPE_BLESS=1"
    );
}

#[test]
fn an_out_of_memory_is_in_the_snapshot() {
    let pickle = temp("oom.pickle");
    let mut args = GPT2.to_vec();
    args.extend(["--memory-limit", "600000000", "--json"]);
    args.extend(["--snapshot", pickle.to_str().unwrap()]);
    let out = vramscope(&args);
    assert_eq!(out.status.code(), Some(1), "exit 1: does not fit");
    let est = json(&out);
    let r = json(&vramscope(&["inspect", pickle.to_str().unwrap(), "--json"]));
    let ooms = r["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{r}");
    assert_eq!(
        ooms[0]["requested_bytes"].as_u64(),
        est["oom"]["tried_to_allocate_bytes"].as_u64(),
        "{}",
        ooms[0]
    );
}

#[test]
fn an_unwritable_snapshot_path_is_a_clear_error() {
    let mut args = GPT2.to_vec();
    args.extend(["--snapshot", "/nonexistent-dir/x.pickle"]);
    let out = vramscope(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent-dir/x.pickle"), "{err}");
}
