//! `vramscope estimate` and `vramscope plan` end to end: the JSON against the
//! H100 fixtures, exit codes, clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A recorded case of `fixtures/estimate`: its config and its phases.
fn fixture(case: &str) -> Value {
    let text =
        std::fs::read_to_string(repo().join(format!("fixtures/estimate/{case}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The full config recorded with a fixture, written as a config.json of
/// the caller's own (tests run at once and may write the same case).
fn config_file(case: &str) -> PathBuf {
    write_config(
        case,
        &serde_json::to_string(&fixture(case)["config"]).unwrap(),
    )
}

/// `text` written as a config.json of the caller's own, named after `tag`.
fn write_config(tag: &str, text: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("vramscope-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{tag}.{n}.config.json"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `vramscope COMMAND --config CONFIG ARGS...` (`args` split at spaces);
/// it must exit with `code`.
fn vramscope(command: &str, config: &Path, args: &str, code: i32) -> Output {
    let mut cmd = bin();
    cmd.args([command, "--config"]).arg(config);
    run(cmd.args(args.split_whitespace()), code)
}

/// Run `cmd`; it must exit with `code` (its stderr shows when not).
fn run(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn estimate_json_equals_the_h100() {
    let case = "llama_train_fp32_adamw";
    let args = "--mode train --batch 4 --seq 512 --json";
    let j = json(&vramscope("estimate", &config_file(case), args, 0));
    assert_eq!(j["schema"], "vramscope.estimate/1");
    let gpu = fixture(case)["phases"].as_array().unwrap().clone();
    let twin = j["phases"].as_array().unwrap();
    assert_eq!(twin.len(), gpu.len());
    for (t, g) in twin.iter().zip(&gpu) {
        for k in [
            "name",
            "allocated_bytes",
            "peak_allocated_bytes",
            "reserved_bytes",
            "peak_reserved_bytes",
            "requested_bytes",
        ] {
            assert_eq!(t[k], g[k], "{} {k}", g["name"]);
        }
    }
    let peak = gpu
        .iter()
        .map(|p| p["peak_allocated_bytes"].as_i64().unwrap())
        .max()
        .unwrap();
    assert_eq!(j["peak_allocated_bytes"].as_i64().unwrap(), peak);
    assert_eq!(j["fits"]["fits"], true);
    // the breakdown accounts for every tensor live at the peak: requested
    // bytes, so a little under the allocated peak (whole 512-byte blocks)
    let sum: u64 = j["breakdown_at_peak"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(
        sum as i64 <= peak && sum as f64 > 0.97 * peak as f64,
        "{sum} vs {peak}"
    );
    assert_eq!(j["by_module"]["bytes"].as_u64().unwrap(), sum);
    assert!(j["breakdown_at_peak"]["optimizer_state"].as_u64().unwrap() > 0);
}

#[test]
fn estimate_out_of_memory_exits_1_and_names_the_phase() {
    let args = "estimate --model llama-3.2-1b --mode train --batch 8 --seq 2048 \
                --memory-limit 8000000000";
    let out = run(bin().args(args.split_whitespace()), 1);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("DOES NOT FIT"), "{text}");
    assert!(text.contains("tried to allocate"), "{text}");
}

/// The summary's heaviest modules fold a model's layers into one line per
/// kind of module (GPT-2's 12 blocks), the whole of each kind summed, and
/// name what the top level holds.
#[test]
fn estimate_summary_folds_repeated_layers() {
    // (at batch 8 the peak is in backward, with every block's saved tensors)
    let args = "estimate --model gpt2 --mode train --batch 8 --seq 1024";
    let out = run(bin().args(args.split_whitespace()), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    let modules: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("heaviest modules"))
        .skip(1)
        .collect();
    assert!(!modules.is_empty(), "{text}");
    assert!(
        modules
            .iter()
            .any(|l| l.contains("transformer.h.*.mlp.act") && l.trim_end().ends_with("x12")),
        "{text}"
    );
    // no layer's own line is left
    assert!(
        !modules.iter().any(|l| l.contains("transformer.h.0")),
        "{text}"
    );
    let top = modules.iter().find(|l| l.contains("(top level)")).unwrap();
    assert!(
        top.contains("gradient") && top.contains("optimizer_state") && top.ends_with(", ..."),
        "{top}"
    );
    // the JSON keeps every module path
    let out = run(bin().args(args.split_whitespace()).arg("--json"), 0);
    let j = json(&out).to_string();
    assert!(j.contains("transformer.h.11.mlp.act"), "{j}");
}

/// A convolution whose cuDNN workspace was never measured is named, in the
/// JSON and in the summary, with what the twin took for it; a measured one
/// (ViT-base's patch embedding) is not.
#[test]
fn estimate_names_the_sizes_it_did_not_measure() {
    let p = write_config(
        "unmeasured",
        r#"{"model_type": "vit", "hidden_size": 320, "intermediate_size": 1280,
            "num_hidden_layers": 2, "num_attention_heads": 5, "image_size": 384,
            "patch_size": 32}"#,
    );
    let out = vramscope(
        "estimate",
        &p,
        "--task image --mode train --batch 4 --json",
        0,
    );
    let notes = json(&out)["unmeasured"].as_array().unwrap().clone();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0]
        .as_str()
        .unwrap()
        .contains("forward convolution of input [4, 3, 384, 384] by weight [320, 3, 32, 32]"));
    assert!(notes[1].as_str().unwrap().contains("weight gradient"));
    let out = vramscope("estimate", &p, "--task image --mode train --batch 4", 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.matches("warning: cuDNN's workspace").count(),
        2,
        "{text}"
    );
    let args = "estimate --model vit-base-patch16-224 --mode train --batch 4 --json";
    let out = run(bin().args(args.split_whitespace()), 0);
    assert_eq!(json(&out)["unmeasured"], serde_json::json!([]));
    // plan names those of the runs that decide its answer
    let limit = "--task image --mode train --memory-limit 1000000000 --no-levers";
    let out = vramscope("plan", &p, &format!("{limit} --json"), 0);
    let plan = json(&out);
    let max = plan["max_batch"].as_i64().unwrap();
    let notes = plan["unmeasured"].as_array().unwrap();
    assert_eq!(notes.len(), 4, "{notes:?}");
    assert!(notes[0]
        .as_str()
        .unwrap()
        .contains(&format!("input [{max}, 3, 384, 384]")));
    assert!(notes[2]
        .as_str()
        .unwrap()
        .contains(&format!("input [{}, 3, 384, 384]", max + 1)));
    let out = vramscope("plan", &p, limit, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.matches("warning: cuDNN's workspace").count(),
        4,
        "{text}"
    );
    // and a sweep, in every cell
    let out = vramscope(
        "plan",
        &p,
        "--task image --mode train --batch 1..4 --json",
        0,
    );
    let notes = json(&out)["unmeasured"].as_array().unwrap().clone();
    assert_eq!(notes.len(), 2 * 4, "{notes:?}");
    let out = vramscope("plan", &p, "--task image --mode train --batch 1..4", 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("warning: 4 of 4 cells took sizes without a measurement"),
        "{text}"
    );
    let args = "plan --model vit-base-patch16-224 --mode train --batch 1..4 --json";
    let out = run(bin().args(args.split_whitespace()), 0);
    assert_eq!(json(&out)["unmeasured"], serde_json::json!([]));
}

#[test]
fn estimate_rejects_bad_configs_clearly() {
    for (text, expect) in [
        (r#"{"model_type": "mamba"}"#, "not supported"),
        (r#"{"hidden_size": 8}"#, "model_type"),
        (
            r#"{"model_type": "llama", "hidden_size": "big"}"#,
            "hidden_size",
        ),
        ("not json", "not valid"),
    ] {
        let p = write_config("bad", text);
        let out = vramscope("estimate", &p, "--mode infer --batch 1", 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{text}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // configs and workloads no device could hold: an error naming the
    // field or the tensor, in a moment (they overflowed the byte count,
    // aborted on a vector of 2^40 layers, or split a reduction into
    // millions of launches)
    let llama = |field: &str, value: &str| {
        format!(
            r#"{{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                "vocab_size": 1000, "{field}": {value}}}"#
        )
    };
    for (text, args, expect) in [
        (
            llama("head_dim", "0"),
            "--mode train --batch 2 --seq 64",
            "head_dim",
        ),
        (
            llama("vocab_size", "4611686018427387904"),
            "--mode train --batch 2 --seq 64",
            "overflowed",
        ),
        (
            llama("num_hidden_layers", "1099511627776"),
            "--mode infer --batch 1 --seq 1",
            "num_hidden_layers",
        ),
        (
            llama("intermediate_size", "1125899906842624"),
            "--mode train --batch 2 --seq 64",
            "at most 1 PiB",
        ),
        (
            llama("vocab_size", "1000"),
            "--mode train --batch 1099511627776 --seq 64",
            "at most 1 PiB",
        ),
        // (aborted allocating the requests of 10^12 steps)
        (
            llama("vocab_size", "1000"),
            "--mode train --batch 1 --seq 64 --steps 1000000000000",
            "at most 1000",
        ),
    ] {
        let p = write_config("bad", &text);
        let out = vramscope("estimate", &p, args, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{text} {args}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--config` takes a model's directory too (its config.json, as
/// `from_pretrained` reads one); a directory without one and a binary file
/// (a snapshot pickle given by mistake) say what they are, exit 2.
#[test]
fn config_takes_a_model_directory_and_names_a_wrong_file() {
    let text = r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 1000}"#;
    let file = write_config("dir", text);
    let dir = file.with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), text).unwrap();
    let args = "--mode infer --batch 1 --seq 64 --json";
    let from_dir = vramscope("estimate", &dir, args, 0);
    assert_eq!(
        json(&from_dir),
        json(&vramscope("estimate", &file, args, 0))
    );
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for (path, expect) in [
        (
            empty.clone(),
            "a directory without a config.json; expected a Hugging Face config.json",
        ),
        (
            repo().join("fixtures/alloc/training.pickle"),
            "not a text file; expected a Hugging Face config.json (JSON text) (it starts as a pickle does",
        ),
    ] {
        let out = vramscope("estimate", &path, args, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{}: {err}", path.display());
    }
}

/// A settings value PyTorch's parser rejects with its bare "stoull" (no
/// digits where a whole number goes) is told so.
#[test]
fn alloc_conf_says_what_a_bare_stoull_means() {
    let p = write_config(
        "stoull",
        r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 1000}"#,
    );
    let out = vramscope(
        "estimate",
        &p,
        "--mode infer --batch 1 --alloc-conf max_split_size_mb:abc",
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid allocator settings: stoull (PyTorch's error: a value that must be a whole number is not one)"),
        "{err}"
    );
}

#[test]
fn plan_finds_the_gpu_largest_batch() {
    // fixtures/plan: llama_train_fp32_adamw under a 4 GiB limit: 11 on the H100
    let cfg = config_file("llama_train_fp32_adamw");
    let args = "--mode train --seq 512 --memory-limit 4294967296 --json --no-levers";
    let j = json(&vramscope("plan", &cfg, args, 0));
    assert_eq!(j["schema"], "vramscope.plan/1");
    assert_eq!(j["max_batch"], 11);
    assert_eq!(j["next_batch_oom"]["batch"], 12);
    assert_eq!(j["next_batch_oom"]["phase"], "backward1");
}

#[test]
fn plan_levers_and_sweep() {
    let cfg = config_file("bert_train_fp32");
    let args = "--mode train --seq 256 --memory-limit 3221225472 --json --target-batch 40";
    let j = json(&vramscope("plan", &cfg, args, 0));
    assert_eq!(j["max_batch"], 18, "the H100 found 18 (fixtures/plan)");
    let levers = j["levers"].as_array().unwrap();
    let names: Vec<&str> = levers.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names[0], "baseline");
    assert!(names.contains(&"weights fp32 -> bf16"), "{names:?}");
    assert!(names.contains(&"checkpointing every layer"), "{names:?}");
    let base = levers[0]["max_batch"].as_i64().unwrap();
    let ckpt = levers
        .iter()
        .find(|l| l["name"] == "checkpointing every layer")
        .unwrap();
    assert!(ckpt["max_batch"].as_i64().unwrap() > base);
    assert!(
        j["accumulation_for_target"]["effective_batch"]
            .as_i64()
            .unwrap()
            >= 40
    );

    let out = vramscope(
        "plan",
        &cfg,
        "--mode infer --batch 1,2 --seq 128,256 --csv",
        0,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(text.starts_with("batch,seq,peak_reserved_bytes"), "{text}");
}

#[test]
fn sweep_json_and_plot_agree() {
    let cfg = config_file("bert_train_fp32");
    let dir = std::env::temp_dir().join(format!("vramscope-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("sweep.html");
    let args = format!(
        "--mode infer --batch 1..12 --seq 128,256 --memory-limit 400000000 --json --html {}",
        html.display()
    );
    let j = json(&vramscope("plan", &cfg, &args, 0));
    let cells = j["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 24);
    // inference: the model runs at batch 1, both ends and the middle of
    // each column; the rest are replayed from a template
    let ran = cells.iter().filter(|c| c["model_ran"] == true).count();
    assert_eq!(ran, 8, "{j}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<circle").count(), 24);
    let hollow = cells.iter().filter(|c| c["fits"] == false).count();
    assert_eq!(hollow, 5, "a 400 MB limit leaves the largest cells out");
    assert_eq!(page.matches(r#"fill="white""#).count(), hollow);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A workload past the twin's unlimited device (64 PiB: here 2,000 layers
/// of a width 2^20 model, each weight under the 1 PiB per-tensor bound) is
/// an error naming the bound, not the figures of a run cut short.
#[test]
fn a_workload_past_the_unlimited_device_is_an_error() {
    let p = write_config(
        "beyond",
        r#"{"model_type": "llama", "hidden_size": 1048576, "intermediate_size": 4194304,
            "num_hidden_layers": 2000, "num_attention_heads": 8192,
            "num_key_value_heads": 8192, "vocab_size": 32000}"#,
    );
    let out = vramscope("estimate", &p, "--mode infer --batch 1 --seq 16 --json", 2);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("needs more than the 67108864.00 GiB the twin simulates without a limit"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A workload that fits at every batch the search tries says so: the
/// answer is a lower bound (`capped`), not a boundary.
#[test]
fn plan_says_when_no_batch_ran_out() {
    let p = write_config(
        "tiny",
        r#"{"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 128}"#,
    );
    let args = "--mode infer --seq 8 --gpu h100 --no-levers";
    let j = json(&vramscope("plan", &p, &format!("{args} --json"), 0));
    assert_eq!(j["capped"], true, "{j}");
    assert_eq!(j["max_batch"], 1 << 15, "{j}");
    assert!(j["next_batch_oom"].is_null(), "{j}");
    assert!(j["capped_by"].as_str().unwrap().contains("bound"), "{j}");
    let text = String::from_utf8(vramscope("plan", &p, args, 0).stdout).unwrap();
    assert!(text.contains("Largest batch: at least 32768"), "{text}");
    // a workload that runs out is not capped
    let j = json(&vramscope(
        "plan",
        &p,
        "--mode infer --seq 8 --memory-limit 200000000 --no-levers --json",
        0,
    ));
    assert_eq!(j["capped"], false, "{j}");
    assert!(j["capped_by"].is_null(), "{j}");
}

/// ViT-base inference in bf16 fits past batch 8192 on an H100, and at 16384
/// its patch embedding's input has more than 2^31 elements, which the twin
/// does not model (PyTorch splits such a convolution): the search answers
/// the last batch that fitted as a lower bound and says why, where it
/// stopped with an error (exit 2) before.
#[test]
fn plan_stops_where_the_twin_stops_modelling() {
    let args = "plan --model vit-base-patch16-224 --mode infer --weights bf16 --gpu h100 \
                --no-levers --json";
    let j = json(&run(bin().args(args.split_whitespace()), 0));
    assert_eq!(j["capped"], true, "{j}");
    assert_eq!(j["max_batch"], 8192, "{j}");
    let why = j["capped_by"].as_str().unwrap();
    assert!(
        why.contains("batch 16384: not modelled") && why.contains("2^31"),
        "{why}"
    );
    // and in the levers of a workload that is not capped itself
    let args = "plan --model vit-base-patch16-224 --mode infer --gpu h100 --json";
    let j = json(&run(bin().args(args.split_whitespace()), 0));
    let levers = j["levers"].as_array().unwrap();
    let bf16 = levers
        .iter()
        .find(|l| l["name"] == "weights fp32 -> bf16")
        .unwrap();
    assert_eq!(
        (bf16["capped"].as_bool(), bf16["max_batch"].as_i64()),
        (Some(true), Some(8192))
    );
    assert_eq!(levers[0]["capped"], false);
}

/// `vramscope ... --json | head` is not an error: a closed pipe ends the
/// run quietly, with the exit code of its verdict.
#[test]
fn a_closed_pipe_is_not_an_error() {
    let p = write_config(
        "pipe",
        r#"{"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 128}"#,
    );
    // a sweep's JSON of 1,024 cells, well over a pipe's 64 KiB buffer
    let mut cmd = bin();
    cmd.args(["plan", "--config"])
        .arg(&p)
        .args("--mode infer --batch 1..512 --seq 8,16 --json".split_whitespace());
    closed_pipe(&mut cmd, 0);
    // and the exit code stays the verdict: a 70B training step does not fit
    // an H100 (exit 1), and its JSON (the module tree) is over 64 KiB
    let args = "estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --json";
    closed_pipe(bin().args(args.split_whitespace()), 1);
}

/// Run `cmd` with its stdout closed at once: it must exit with `code` and
/// print nothing on stderr.
fn closed_pipe(cmd: &mut Command, code: i32) {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// An image model's inputs have no sequence length: the JSON says null
/// where text models give theirs, and a sweep over several is refused.
#[test]
fn image_models_have_no_sequence() {
    let est = "estimate --model vit-base-patch16-224 --mode train --batch 2 --json";
    let j = json(&run(bin().args(est.split_whitespace()), 0));
    assert!(j["workload"]["seq"].is_null(), "{j}");
    let plan = "plan --model vit-base-patch16-224 --mode infer --no-levers --json";
    let j = json(&run(bin().args(plan.split_whitespace()), 0));
    assert!(j["seq"].is_null(), "{j}");
    let text = "estimate --model gpt2 --mode train --batch 2 --seq 64 --json";
    let j = json(&run(bin().args(text.split_whitespace()), 0));
    assert_eq!(j["workload"]["seq"], 64);
    let sweep = "plan --model vit-base-patch16-224 --mode train --batch 1..4 --seq 1,2";
    let out = run(bin().args(sweep.split_whitespace()), 2);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--seq 1,2 does not apply to vit"), "{e}");
    // one --seq is no more silently ignored than two
    let est = "estimate --model vit-base-patch16-224 --mode train --batch 2 --seq 1024";
    let e = run(bin().args(est.split_whitespace()), 2);
    assert!(String::from_utf8_lossy(&e.stderr).contains(
        "error: --seq 1024 does not apply to vit: an image model's input is (batch, 3, 224, 224)"
    ));
}

/// The rough edges a newcomer hit (issue 34): each error says what was
/// given and what was expected; what the config left out is said.
#[test]
fn rough_edges_say_what_was_given_and_expected() {
    let err = |args: &str| {
        let out = run(bin().args(args.split_whitespace()), 2);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err("estimate --model gpt2 --mode train --batch -1");
    assert!(
        e.contains("-1 is not a batch size: expected an integer of at least 1"),
        "{e}"
    );
    let e = err("plan --model gpt2 --mode train --batch -1,2");
    assert!(e.contains("-1: expected integers of at least 1"), "{e}");
    let e = err("estimate --model llama-3.1-8b --mode train --batch 1 --seq 99999999999");
    assert!(e.contains("batch 1 x seq 99999999999"), "{e}");
    // defaults and dtype taken from the config are said
    let cfg = write_config(
        "only_hidden",
        r#"{"model_type": "llama", "hidden_size": 256}"#,
    );
    let out = vramscope("estimate", &cfg, "--mode infer --batch 1 --seq 16", 0);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("note: the config leaves out 5 field(s); transformers' llama class defaults were used: intermediate_size=11008, num_attention_heads=32, num_hidden_layers=32"), "{t}");
    let cfg = write_config(
        "bf16",
        r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 1000, "torch_dtype": "bfloat16"}"#,
    );
    let j = json(&vramscope(
        "estimate",
        &cfg,
        "--mode infer --batch 1 --seq 16 --json",
        0,
    ));
    assert_eq!(j["workload"]["weights"], "bf16");
    assert_eq!(j["workload"]["weights_from"], "config");
    assert_eq!(j["config_defaults"], serde_json::json!({}));
    let j = json(&vramscope(
        "estimate",
        &cfg,
        "--mode infer --batch 1 --seq 16 --weights fp32 --json",
        0,
    ));
    assert_eq!(j["workload"]["weights_from"], "--weights");
}

/// `--gpu` takes every GPU of the profile table and `custom --memory`;
/// sizes are written one way everywhere; an estimated constant is named
/// in the text and graded in the JSON.
#[test]
fn every_gpu_and_one_size_syntax() {
    let est = |gpu: &str, code: i32| {
        let mut cmd = bin();
        cmd.args([
            "estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1",
        ]);
        cmd.args(["--seq", "64"]).args(gpu.split_whitespace());
        run(&mut cmd, code)
    };
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // measured: no note
    let h100 = text(&est("--gpu h100", 0));
    assert!(!h100.contains("not measured"), "{h100}");
    for gpu in [
        "a100-40gb",
        "a100-80gb",
        "l40s",
        "l4",
        "a10g",
        "rtx4090",
        "rtx3090",
        "t4",
        "v100",
        "b200",
    ] {
        let t = text(&est(&format!("--gpu {gpu}"), 0));
        assert!(
            t.contains(" was not measured here: its total memory, CUDA context"),
            "{gpu}: {t}"
        );
    }
    // custom, in every spelling of 24 GiB: the same capacity
    let caps: Vec<u64> = ["24GiB", "24G", "25769803776", "24gib"]
        .iter()
        .map(|m| {
            let o = est(&format!("--gpu custom --memory {m} --json"), 0);
            json(&o)["fits"]["capacity_bytes"].as_u64().unwrap()
        })
        .collect();
    assert!(caps.windows(2).all(|w| w[0] == w[1]), "{caps:?}");
    let j = json(&est(
        "--gpu custom --memory 24GB --capability 8.9 --json",
        0,
    ));
    assert_eq!(j["gpu_key"], "custom");
    assert_eq!(j["gpu_total_memory_bytes"], 24_000_000_000u64);
    assert_eq!(j["gpu_constants"]["cuda_context"]["grade"], "estimated");
    assert_eq!(
        j["gpu_constants"]["total_memory"]["source"],
        "given with --memory"
    );
    // what the user gave and what was expected
    let e = stderr(&est("--gpu custom", 2));
    assert!(e.contains("--gpu custom needs --memory SIZE"), "{e}");
    let e = stderr(&est("--gpu t4 --memory 24GiB", 2));
    assert!(e.contains("give them with --gpu custom"), "{e}");
    let e = stderr(&est("--gpu a100", 2));
    assert!(
        e.contains("unknown GPU \"a100\"; expected one of h100, h200, a100-40gb"),
        "{e}"
    );
    let e = stderr(&est("--memory-limit 0", 2));
    assert!(
        e.contains("--memory-limit 0: the limit must be more than 0 bytes"),
        "{e}"
    );
    let e = stderr(&est("--memory-limit 24parsecs", 2));
    assert!(e.contains("unknown unit \"parsecs\""), "{e}");
    // applied as set_per_process_memory_fraction(limit / total): PyTorch's
    // `fraction * total` truncates, as the twin's does
    let j = json(&est("--memory-limit 2GiB --json", 0));
    let cap = j["fits"]["capacity_bytes"].as_u64().unwrap();
    assert!((2u64 << 30) - cap <= 1, "{cap}");
}

/// Issue 34: the plan says the boundary is not monotone, names the
/// batches below the largest that fail and where, recommends a batch with
/// memory to spare; the sweep grid shows allocated next to reserved.
#[test]
fn plan_reports_a_boundary_that_is_not_monotone() {
    let args = "plan --model llama-3.1-8b --mode train --seq 512 --weights bf16 --no-levers";
    let out = run(bin().args(args.split_whitespace()), 0);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("Largest batch: 8 "), "{t}");
    assert!(
        t.contains("Not monotone: every batch up to 5 fits, but 6, 7 do not:"),
        "{t}"
    );
    assert!(
        t.contains(
            "  batch 6: out of memory in step1 (_foreach_sqrt), tried to allocate 1002.00 MiB"
        ),
        "{t}"
    );
    assert!(
        t.contains("  batch 7: out of memory in forward1 (_log_softmax"),
        "{t}"
    );
    let j = json(&run(bin().args(args.split_whitespace()).arg("--json"), 0));
    assert_eq!(j["max_batch"], 8);
    assert_eq!(j["max_batch_all_smaller_fit"], 5);
    assert_eq!(j["checked_up_to"], 15);
    assert_eq!(j["failing_below_max_batch"][0]["batch"], 6);
    assert_eq!(j["failing_below_max_batch"][0]["op"], "_foreach_sqrt");
    assert_eq!(j["failing_below_max_batch"][1]["batch"], 7);
    assert!(j["recommended_batch"].as_i64().unwrap() <= 5);
    // a monotone one says every batch fits
    let args = "plan --model gpt2 --mode infer --seq 128 --memory-limit 2GiB --no-levers";
    let out = run(bin().args(args.split_whitespace()), 0);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("Recommended: batch "), "{t}");
    let grid = "plan --model gpt2 --mode infer --seq 64 --batch 1,2";
    let out = run(bin().args(grid.split_whitespace()), 0);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.starts_with("peak allocated / peak reserved on NVIDIA H100 80GB HBM3"),
        "{t}"
    );
    assert!(t.lines().nth(2).unwrap().contains(" / "), "{t}");
}

/// `estimate --fsdp 2 --json` (issue #33): the figures of the GPUs' rank 0
/// of `fixtures/multi/multi_h200_n2.jsonl` at the top level, every rank in
/// `ranks` (GPT-2's 50257-row vocabulary shards unevenly: two groups).
#[test]
fn fsdp_gives_every_ranks_phases_and_the_fullest_at_the_top() {
    let gpt2 = write_config(
        "fsdp_gpt2",
        r#"{"model_type": "gpt2", "n_embd": 512, "n_layer": 4, "n_head": 8, "vocab_size": 50257, "n_positions": 1024}"#,
    );
    let out = vramscope(
        "estimate",
        &gpt2,
        "--mode train --batch 4 --seq 512 --gpu h200 --fsdp 2 --json",
        0,
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["workload"]["parallel"]["kind"], "fsdp");
    assert_eq!(j["workload"]["parallel"]["world"], 2);
    let ranks = j["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[0]["ranks"], serde_json::json!([0]));
    assert_eq!(ranks[1]["ranks"], serde_json::json!([1]));
    let recorded: Vec<Value> =
        std::fs::read_to_string(repo().join("fixtures/multi/multi_h200_n2.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l: &Value| l["case"] == "fsdp_gpt2_fp32" && l["phase"] != "init")
            .collect();
    for (r, group) in ranks.iter().enumerate() {
        let gpu: Vec<&Value> = recorded.iter().filter(|l| l["rank"] == r).collect();
        let phases = group["phases"].as_array().unwrap();
        assert_eq!(phases.len(), gpu.len());
        for (p, g) in phases.iter().zip(gpu) {
            assert_eq!(
                p["peak_allocated_bytes"], g["peak_allocated_bytes"],
                "rank {r}"
            );
            assert_eq!(
                p["peak_reserved_bytes"], g["peak_reserved_bytes"],
                "rank {r}"
            );
        }
    }
    // a world of one, or a rank outside it, is refused
    vramscope("estimate", &gpt2, "--mode train --batch 4 --fsdp 1", 2);
    vramscope(
        "estimate",
        &gpt2,
        "--mode train --batch 4 --fsdp 2 --fsdp-rank 2",
        2,
    );
}

/// The golden files of whole outputs (`tests/golden`).
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// Compare `got` with the golden file `name`, printing the first
/// difference; with `VRAMSCOPE_BLESS=1`, write it instead (then review the
/// diff).
fn assert_golden(name: &str, got: &str) {
    let path = Path::new(GOLDEN).join(name);
    if std::env::var_os("VRAMSCOPE_BLESS").is_some() {
        std::fs::create_dir_all(GOLDEN).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with VRAMSCOPE_BLESS=1)", path.display()));
    if want == got {
        return;
    }
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let i = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    panic!(
        "{name} differs from its golden file at line {}:\n  golden: {:?}\n  now:    {:?}\n({} vs {} lines; VRAMSCOPE_BLESS=1 rewrites it)",
        i + 1,
        w.get(i),
        g.get(i),
        w.len(),
        g.len()
    );
}

/// Whole outputs of `estimate` and `plan`, text and JSON, as a user sees
/// them: a fit, an out-of-memory on an estimated GPU, a plan whose
/// boundary is not monotone, a sweep grid.
#[test]
fn whole_outputs_match_their_golden_files() {
    let cases: &[(&str, &str, i32)] = &[
        (
            "estimate_gpt2_train_bf16.txt",
            "estimate --model gpt2 --mode train --batch 2 --seq 128 --weights bf16",
            0,
        ),
        (
            "estimate_gpt2_train_bf16.json",
            "estimate --model gpt2 --mode train --batch 2 --seq 128 --weights bf16 --json",
            0,
        ),
        (
            "estimate_llama1b_a100_40gb_oom.txt",
            "estimate --model llama-3.2-1b --mode train --batch 8 --seq 2048 --gpu a100-40gb",
            1,
        ),
        (
            "plan_llama8b_seq512.txt",
            "plan --model llama-3.1-8b --mode train --seq 512 --weights bf16 --no-levers",
            0,
        ),
        (
            "plan_llama8b_seq512.json",
            "plan --model llama-3.1-8b --mode train --seq 512 --weights bf16 --no-levers --json",
            0,
        ),
        (
            "plan_gpt2_levers.txt",
            "plan --model gpt2 --mode train --seq 256 --memory-limit 3GiB --target-batch 40",
            0,
        ),
        (
            "sweep_gpt2_infer.txt",
            "plan --model gpt2 --mode infer --batch 1,2,4 --seq 64,128 --memory-limit 1GiB",
            0,
        ),
    ];
    for (name, args, code) in cases {
        let out = run(bin().args(args.split_whitespace()), *code);
        assert_golden(name, &String::from_utf8_lossy(&out.stdout));
    }
}

/// `plan --fsdp N` (issue #33): the largest batch per rank is the last
/// `estimate --fsdp N` that fits under the limit, the fewest GPUs for a
/// global batch the first N whose ranks fit `ceil(B / N)`, and the levers
/// are each an estimate at the batch searched.
#[test]
fn plan_under_fsdp_finds_the_largest_batch_per_rank_and_the_fewest_gpus() {
    let llama = write_config(
        "fsdp_llama",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    let limit = "--gpu h200 --memory-limit 4GiB --seq 512";
    let j = json(&vramscope(
        "plan",
        &llama,
        &format!("--mode train {limit} --fsdp 2 --target-batch 64 --json"),
        0,
    ));
    assert_eq!(j["schema"], "vramscope.plan_fsdp/1");
    let max = j["max_batch_per_rank"].as_i64().unwrap();
    assert!(max >= 1, "{j}");
    assert_eq!(j["max_global_batch"].as_i64().unwrap(), 2 * max);
    // every batch above the largest up to the doubling's first failure
    // was run: the largest is exact up to there, fits monotone or not
    let checked = j["max_batch_checked_up_to"].as_i64().unwrap();
    assert!(checked > max, "{j}");
    let est = |world: i64, b: i64, code: i32| {
        vramscope(
            "estimate",
            &llama,
            &format!("--mode train {limit} --fsdp {world} --batch {b}"),
            code,
        )
    };
    est(2, max, 0);
    est(2, max + 1, 1);
    let n = j["fewest_gpus"]["gpus"].as_i64().unwrap();
    let per = j["fewest_gpus"]["batch_per_rank"].as_i64().unwrap();
    assert_eq!(per, (64 + n - 1) / n);
    est(n, per, 0);
    // every count below the fewest is run and fails (none assumed)
    for m in 2..n {
        est(m, (64 + m - 1) / m, 1);
    }
    let levers = j["levers"].as_array().unwrap();
    assert_eq!(levers[0]["name"], "as given");
    assert!(levers.len() >= 4, "{j}");
}

/// `plan --fsdp N --batch LIST` (issue #33): one row per batch per rank,
/// each the fullest rank's `estimate --fsdp N` at that batch.
#[test]
fn plan_under_fsdp_sweeps_the_batch_per_rank() {
    let llama = write_config(
        "fsdp_llama_sweep",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    let limit = "--gpu h200 --memory-limit 4GiB --seq 512";
    let j = json(&vramscope(
        "plan",
        &llama,
        &format!("--mode train {limit} --fsdp 2 --batch 1,64 --no-levers --json"),
        0,
    ));
    let rows = j["sweep"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{j}");
    assert!(j["levers"].as_array().unwrap().len() == 1, "{j}");
    for (row, fits) in rows.iter().zip([true, false]) {
        let b = row["batch_per_rank"].as_i64().unwrap();
        assert_eq!(row["global_batch"].as_i64().unwrap(), 2 * b);
        assert_eq!(row["fits"], fits, "{row}");
        let e = json(&vramscope(
            "estimate",
            &llama,
            &format!("--mode train --gpu h200 --seq 512 --fsdp 2 --batch {b} --json"),
            0,
        ));
        assert_eq!(row["peak_reserved_bytes"], e["peak_reserved_bytes"], "{e}");
    }
}

/// `estimate --ddp 2 --json` (issue #33): one group of every rank, the
/// figures of `ddp_llama_fp32_view` on 2 H200s (`fixtures/multi`), and
/// `--ddp` with `--fsdp` refused.
#[test]
fn ddp_gives_one_group_of_every_rank_with_the_gpus_figures() {
    let llama = write_config(
        "ddp_llama",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    let j = json(&vramscope(
        "estimate",
        &llama,
        "--mode train --batch 4 --seq 512 --gpu h200 --ddp 2 --ddp-bucket-mb 25 --ddp-grad-as-bucket-view --json",
        0,
    ));
    assert_eq!(j["workload"]["parallel"]["kind"], "ddp");
    assert_eq!(j["workload"]["parallel"]["gradient_as_bucket_view"], true);
    let ranks = j["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1);
    assert_eq!(ranks[0]["ranks"], serde_json::json!([0, 1]));
    let gpu: Vec<Value> =
        std::fs::read_to_string(repo().join("fixtures/multi/multi_h200_n2.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l: &Value| {
                l["case"] == "ddp_llama_fp32_view" && l["rank"] == 0 && l["phase"] != "init"
            })
            .collect();
    let phases = j["phases"].as_array().unwrap();
    assert_eq!(phases.len(), gpu.len());
    for (p, g) in phases.iter().zip(&gpu) {
        assert_eq!(p["peak_allocated_bytes"], g["peak_allocated_bytes"]);
        assert_eq!(p["peak_reserved_bytes"], g["peak_reserved_bytes"]);
    }
    vramscope(
        "estimate",
        &llama,
        "--mode train --batch 4 --ddp 2 --fsdp 2",
        2,
    );
    vramscope(
        "estimate",
        &llama,
        "--mode train --batch 4 --ddp 2 --ddp-bucket-mb 0",
        2,
    );
}

/// `plan --ddp N`: the largest batch per rank is the last `estimate --ddp
/// N` that fits, and FSDP is among the levers.
#[test]
fn plan_under_ddp_finds_the_largest_batch_per_rank() {
    let llama = write_config(
        "ddp_plan_llama",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    let limit = "--gpu h200 --memory-limit 4GiB --seq 512";
    let j = json(&vramscope(
        "plan",
        &llama,
        &format!("--mode train {limit} --ddp 2 --target-batch 64 --json"),
        0,
    ));
    assert_eq!(j["schema"], "vramscope.plan_ddp/1");
    let max = j["max_batch_per_rank"].as_i64().unwrap();
    assert!(max >= 1, "{j}");
    let est = |b: i64, code: i32| {
        vramscope(
            "estimate",
            &llama,
            &format!("--mode train {limit} --ddp 2 --batch {b}"),
            code,
        )
    };
    est(max, 0);
    est(max + 1, 1);
    let levers = j["levers"].as_array().unwrap();
    assert!(
        levers
            .iter()
            .any(|l| l["name"].as_str().unwrap().starts_with("FSDP2 instead")),
        "{j}"
    );
}

/// `plan` on one GPU where not even batch 1 fits, or the target does not
/// (issue #33): the fewest GPUs under FSDP2 and DDP are what `plan --fsdp N`
/// / `--ddp N` say at that N (the same peak), one GPU fewer does not fit,
/// and the command it prints runs.
#[test]
fn plan_on_one_gpu_points_past_it_with_what_plan_fsdp_n_says() {
    let llama = write_config(
        "sharding_llama",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    // `plan ARGS --json` on the config
    let plan =
        |args: &str, code: i32| json(&vramscope("plan", &llama, &format!("{args} --json"), code));
    // the way's answer against `plan --KIND N --target-batch B` at N and at N - 1
    let check = |given: &str, way: &Value, target: Option<i64>| {
        let n = way["gpus"].as_i64().unwrap();
        let kind = way["parallel"].as_str().unwrap();
        let ckpt = if way["adds_checkpointing"] == true {
            " --checkpointing"
        } else {
            ""
        };
        let b = target.unwrap_or(n);
        let at = |m: i64| {
            plan(
                &format!("{given}{ckpt} --{kind} {m} --target-batch {b}"),
                if target.is_some() || m == n { 0 } else { 1 },
            )
        };
        let there = at(n);
        // the batch per rank it was asked at fits there, with the same peak
        assert_eq!(there["levers"][0]["fits"], true, "{there}");
        assert_eq!(
            there["peak_reserved_bytes"], way["peak_reserved_bytes"],
            "{there}"
        );
        assert_eq!(way["batch_per_rank"].as_i64().unwrap(), (b + n - 1) / n);
        if target.is_some() {
            assert_eq!(there["fewest_gpus"]["gpus"], n, "{there}");
        } else {
            assert!(
                there["max_batch_per_rank"].as_i64().unwrap() >= 1,
                "{there}"
            );
        }
        if n > 2 {
            let fewer = at(n - 1);
            assert_eq!(fewer["levers"][0]["fits"], false, "{fewer}");
        }
        // the command printed is that plan, and it runs
        let cmd = way["command"].as_str().unwrap().to_string();
        assert!(cmd.ends_with(&format!("{ckpt} --{kind} {n}")), "{cmd}");
        let words: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = run(bin().args(&words), 0);
        assert_eq!(json(&out)["world"], n);
    };
    let given = "--mode train --gpu h200 --seq 512 --no-levers";
    // 800 MiB: FSDP2 fits batch 1 per rank on a few GPUs, DDP on none
    let j = plan(&format!("{given} --memory-limit 800MiB"), 1);
    assert_eq!(j["max_batch"], 0);
    let s = &j["sharding"];
    assert_eq!(s["target_batch"], Value::Null);
    assert_eq!(s["max_gpus"], 64);
    let ways = s["ways"].as_array().unwrap();
    assert_eq!(ways.len(), 2, "{s}");
    assert_eq!(
        (&ways[0]["parallel"], &ways[0]["adds_checkpointing"]),
        (&"fsdp".into(), &false.into())
    );
    check(&format!("{given} --memory-limit 800MiB"), &ways[0], None);
    // DDP replicates: on none of 2 to 64, and its peak is that of 64 ranks
    assert_eq!(ways[1]["parallel"], "ddp");
    assert_eq!(ways[1]["gpus"], Value::Null);
    assert_eq!(ways[1]["command"], Value::Null);
    let ddp64 = plan(
        &format!("{given} --memory-limit 800MiB --ddp 64 --target-batch 64"),
        1,
    );
    assert_eq!(ddp64["fewest_gpus"]["gpus"], Value::Null);
    assert_eq!(ddp64["peak_reserved_bytes"], ways[1]["peak_reserved_bytes"]);
    // 600 MiB: FSDP2 fits on none, FSDP2 with checkpointing on some
    let j = plan(&format!("{given} --memory-limit 600MiB"), 1);
    let ways = j["sharding"]["ways"].as_array().unwrap();
    assert_eq!(ways.len(), 3, "{j}");
    assert_eq!(ways[0]["gpus"], Value::Null);
    assert_eq!(ways[1]["adds_checkpointing"], true);
    check(&format!("{given} --memory-limit 600MiB"), &ways[1], None);
    // 1500 MiB: batch 2 fits on one GPU, the target 64 on more: both ways
    let given = format!("{given} --memory-limit 1500MiB");
    let j = plan(&format!("{given} --target-batch 64"), 0);
    assert!(j["max_batch"].as_i64().unwrap() >= 1, "{j}");
    let s = &j["sharding"];
    assert_eq!(s["target_batch"], 64);
    let ways = s["ways"].as_array().unwrap();
    assert_eq!(ways.len(), 2, "{s}");
    for way in ways {
        check(&given, way, Some(64));
    }
    // what FSDP2 does not model is said, and not tried again with checkpointing
    let j = plan(
        "--mode train --gpu h200 --seq 512 --no-levers --memory-limit 300MiB --optimizer adafactor",
        1,
    );
    let ways = j["sharding"]["ways"].as_array().unwrap();
    assert_eq!(ways.len(), 2, "{j}");
    assert!(
        ways[0]["not_modelled"]
            .as_str()
            .unwrap()
            .contains("Adafactor"),
        "{j}"
    );
    assert_eq!(ways[1]["parallel"], "ddp");
    // a target that fits on one GPU: no answer past it
    let j = plan(&format!("{given} --target-batch 1"), 0);
    assert_eq!(j["sharding"], Value::Null);
}

/// `--fsdp`/`--ddp` with what is not modelled under them (issue #33): each
/// refused with an error naming the one knob given, not a list of three.
#[test]
fn parallel_refusals_name_what_is_not_modelled() {
    let llama = write_config(
        "refuse_llama",
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
    );
    let vit = write_config(
        "refuse_vit",
        r#"{"model_type": "vit", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16, "num_labels": 10}"#,
    );
    for (config, args, says) in [
        (
            &llama,
            "--mode infer --grad inference-mode --fsdp 2 --seq 128",
            "FSDP under torch.inference_mode()",
        ),
        (
            &llama,
            "--mode train --optimizer adafactor --fsdp 2 --seq 128",
            "FSDP with Adafactor",
        ),
        (
            &llama,
            "--mode generate --fsdp 2 --seq 128",
            "FSDP with --mode generate",
        ),
        (
            &llama,
            "--mode train --autocast fp16 --fsdp 2 --fsdp-param-dtype bf16 --seq 128",
            "cast_forward_inputs",
        ),
        (
            &vit,
            "--mode train --fsdp 2 --fsdp-param-dtype bf16",
            "cast_forward_inputs of pixel_values",
        ),
    ] {
        let out = vramscope(
            "estimate",
            config,
            &format!("{args} --batch 1 --gpu h200"),
            2,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args}: {err}");
    }
}

/// What issue #33 refused by name before and models now: inference passes,
/// gradient accumulation (`set_requires_gradient_sync(False)`, `no_sync()`),
/// autocast, and the phi3, gemma2, bert, roberta and vit families, under
/// both wrappers.
#[test]
fn parallel_runs_inference_accumulation_autocast_and_every_family() {
    let llama = write_config(
        "par_llama",
        r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}"#,
    );
    for par in ["--fsdp 2", "--ddp 2"] {
        for args in [
            "--mode infer",
            "--mode infer --grad enabled",
            "--mode train --accumulation 2",
            "--mode train --autocast bf16",
        ] {
            vramscope(
                "estimate",
                &llama,
                &format!("{args} {par} --batch 1 --seq 64 --gpu h200"),
                0,
            );
        }
    }
    let families = [
        (
            "phi3",
            r#"{"model_type": "phi3", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 32064, "max_position_embeddings": 512}"#,
            "--seq 64",
        ),
        (
            "gemma2",
            r#"{"model_type": "gemma2", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 512}"#,
            "--seq 64",
        ),
        (
            "bert",
            r#"{"model_type": "bert", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128}"#,
            "--seq 64",
        ),
        (
            "roberta",
            r#"{"model_type": "roberta", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 130, "pad_token_id": 1, "type_vocab_size": 1}"#,
            "--seq 64",
        ),
        (
            "vit",
            r#"{"model_type": "vit", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16, "num_labels": 10}"#,
            "",
        ),
    ];
    for (name, json, seq) in families {
        let config = write_config(&format!("par_{name}"), json);
        for par in ["--fsdp 2", "--ddp 2"] {
            let out = vramscope(
                "estimate",
                &config,
                &format!("--mode train {par} --batch 2 {seq} --gpu h200 --json"),
                0,
            );
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(j["workload"]["parallel"]["world"], 2, "{name} {par}");
        }
    }
}

/// What issue #33 refused by name before and models now (session 7): LoRA
/// under both wrappers, every element-wise optimizer under FSDP2, DDP's
/// `find_unused_parameters`, `generate` on a DDP-wrapped model, and a
/// mixture of experts under DDP.
#[test]
fn parallel_runs_lora_optimizers_unused_parameters_and_generate() {
    let llama = write_config(
        "par7_llama",
        r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}"#,
    );
    for args in [
        "--fsdp 2 --lora 8",
        "--fsdp 2 --lora 8 --weights bf16",
        "--fsdp 2 --lora 8 --fsdp-param-dtype bf16 --checkpointing",
        "--ddp 2 --lora 8 --weights bf16",
        "--ddp 2 --ddp-find-unused-parameters",
        "--ddp 2 --ddp-find-unused-parameters --lora 8",
        "--fsdp 2 --optimizer sgd --momentum 0.9",
        "--fsdp 2 --optimizer adagrad",
        "--fsdp 2 --optimizer rmsprop",
        "--fsdp 2 --optimizer adamw --optimizer-impl for-loop",
        "--fsdp 2 --optimizer adamw --optimizer-impl fused",
        "--ddp 2 --optimizer adafactor",
    ] {
        vramscope(
            "estimate",
            &llama,
            &format!("--mode train {args} --batch 1 --seq 64 --gpu h200"),
            0,
        );
    }
    vramscope(
        "estimate",
        &llama,
        "--mode generate --ddp 2 --batch 1 --seq 64 --new-tokens 4 --gpu h200",
        0,
    );
    let mixtral = write_config(
        "par7_mixtral",
        r#"{"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512, "num_local_experts": 4, "num_experts_per_tok": 2}"#,
    );
    // (its experts are two 3-D parameters, so each gets a gradient every
    // step whatever the routing: no unused parameter for DDP to raise on)
    vramscope(
        "estimate",
        &mixtral,
        "--mode train --ddp 2 --batch 1 --seq 64 --gpu h200",
        0,
    );
}

/// `--alloc-conf per_process_memory_fraction:F` is the limit that estimate
/// and plan report, as `--memory-fraction F` is (PyTorch's allocator starts
/// with the settings' fraction, `DeviceCachingAllocator`'s constructor), and
/// `--memory-limit`/`--memory-fraction` replace it, as a later
/// `torch.cuda.set_per_process_memory_fraction` does.
#[test]
fn the_alloc_conf_fraction_is_the_limit_reported() {
    let cfg = config_file("llama_train_fp32_adamw");
    let limit = 4294967296u64;
    // the fraction --memory-limit sets (H100: 85017493504 bytes)
    let f = limit as f64 / 85017493504.0;
    let by_limit = format!("--memory-limit {limit}");
    let by_conf = format!("--alloc-conf per_process_memory_fraction:{f}");
    let overridden = format!("{by_limit} --alloc-conf per_process_memory_fraction:0.9");
    let plan = |how: &str| {
        let args = format!("--mode train --seq 512 --json --no-levers {how}");
        json(&vramscope("plan", &cfg, &args, 0))
    };
    let (a, b, c) = (plan(&by_limit), plan(&by_conf), plan(&overridden));
    assert_eq!(a["max_batch"], 11, "fixtures/plan: 11 on the H100");
    for k in [
        "capacity_bytes",
        "max_batch",
        "recommended_batch",
        "recommended_limit_bytes",
    ] {
        assert_eq!(a[k], b[k], "{k}");
        assert_eq!(a[k], c[k], "{k}");
    }
    assert!(a["capacity_bytes"].as_u64().unwrap() <= limit);
    // estimate: the limit and the headroom under it, at the batch that
    // does not fit
    let estimate = |how: &str| {
        let args = format!("--mode train --batch 12 --seq 512 --json {how}");
        json(&vramscope("estimate", &cfg, &args, 1))["fits"].clone()
    };
    let (a, b, c) = (
        estimate(&by_limit),
        estimate(&by_conf),
        estimate(&overridden),
    );
    assert_eq!(a["fits"], false);
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert!(a["headroom_bytes"].as_i64().unwrap() < 0, "{a}");
}
