//! The `vramscope` binary end to end: exit codes, JSON shape, the seeds.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn replay_builtin_is_exact() {
    let out = bin().args(["replay"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("EXACT"), "{text}");
    assert!(text.contains("16/16"), "{text}");
}

/// A real torch 2.11 snapshot whose frames hold a line PyTorch did not know
/// (2**64-1): read, replayed exactly, and inspected.
#[test]
fn replay_of_a_snapshot_with_an_unknown_line_is_exact() {
    let f = repo().join("fixtures/snapshot_real/iy03_phase0_unknown_line_h200.pickle");
    let out = bin().arg("replay").arg(&f).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Replayed 335 trace entries"), "{text}");
    assert!(text.contains("11/11 reproduced"), "{text}");
    assert!(text.contains("EXACT"), "{text}");
    let out = bin().arg("inspect").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn replay_json_has_the_documented_fields() {
    let f = repo().join("fixtures/alloc/oom_retry.pickle");
    let out = bin()
        .args(["replay", "--json", "--memory-fraction"])
        .arg((2.0 * (1u64 << 30) as f64 / 85_017_493_504.0).to_string())
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "trace_entries",
        "segment_events_matched",
        "segment_events_total",
        "first_divergence",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "final_allocated_bytes",
        "final_reserved_bytes",
        "num_alloc_retries",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert!(v["first_divergence"].is_null());
    // The GPU's memory_stats: fixtures/alloc/oom_retry.stats.json.
    assert_eq!(v["num_alloc_retries"], 2);
    assert_eq!(v["peak_allocated_bytes"], 1_719_664_640u64);
}

#[test]
fn replay_without_the_fraction_diverges_with_exit_1() {
    // The OOM retry case needs its memory fraction: without it the twin does
    // not run out where the GPU did, and says where.
    let f = repo().join("fixtures/alloc/oom_retry.pickle");
    let out = bin().args(["replay", "--json"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["first_divergence"]["trace_index"].as_u64().is_some());
}

#[test]
fn not_a_snapshot_is_exit_2_with_a_reason() {
    let dir = std::env::temp_dir().join(format!("vramscope-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("x.pickle");
    std::fs::write(&f, b"not a pickle at all").unwrap();
    let out = bin().args(["replay"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a readable PyTorch memory snapshot"),
        "{err}"
    );
    let out = bin()
        .args(["replay", "/nonexistent/file.pickle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn summary_prints_pytorchs_table() {
    let f = repo().join("fixtures/alloc/default.pickle");
    let out = bin()
        .args(["replay", "--summary"])
        .arg(&f)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let want = std::fs::read_to_string(repo().join("fixtures/alloc/default.summary.txt")).unwrap();
    assert!(text.ends_with(&want), "{text}");
}

#[test]
fn demo_json_equals_the_h100_fixture() {
    let truth = std::fs::read_to_string(repo().join("fixtures/seeds/seeds_h100.jsonl")).unwrap();
    for case in ["seed001", "seed003b", "snapshot"] {
        let out = bin().args(["demo", case, "--json"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let got: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let want: Vec<serde_json::Value> = truth
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["case"] == case)
            .collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn demo_unknown_case_is_exit_2() {
    let out = bin().args(["demo", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `--model list` lists the presets with nothing else given (or with
/// everything), and exits 0; help and conflicts stay clap's.
#[test]
fn model_list_needs_nothing_else() {
    let lists = |args: &[&str]| {
        let out = bin().args(args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        text.contains("model_type  layers")
            && ["llama-3.1-70b", "vit-base-patch16-224"]
                .iter()
                .all(|p| text.contains(p))
    };
    for command in ["estimate", "plan"] {
        assert!(lists(&[command, "--model", "list"]));
        assert!(lists(&[command, "--model=list", "--mode", "train"]));
        assert!(lists(&[
            command, "--model", "list", "--mode", "train", "--batch", "2"
        ]));
        // --help is help
        assert!(!lists(&[command, "--model", "list", "--help"]));
    }
    // a second model is clap's conflict, exit 2
    let out = bin()
        .args(["estimate", "--config", "x.json", "--model", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Every example `--help` shows runs as printed (in a directory of its own,
/// for the files it writes), and exits 0 or 1: a verdict, not bad input.
#[test]
fn help_examples_run() {
    let dir = std::env::temp_dir().join(format!("vramscope-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2}"#,
    )
    .unwrap();
    let mut ran = 0;
    for command in ["estimate", "plan"] {
        let out = bin().args([command, "--help"]).output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        let examples = help
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{command} --help shows no examples:\n{help}"));
        // an example's lines, joined where one ends with a backslash
        let joined = examples.replace("\\\n", " ");
        for line in joined
            .lines()
            .filter(|l| l.trim_start().starts_with("vramscope "))
        {
            let args: Vec<&str> = line.split_whitespace().skip(1).collect();
            let out = bin().args(&args).current_dir(&dir).output().unwrap();
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "{line}: {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 6, "{ran} examples");
    let _ = std::fs::remove_dir_all(&dir);
}
