//! Estimates against the GPU: every workload of `validation/hf_cases.json`
//! recorded on an H100 (`fixtures/estimate/NAME.json`, by
//! `validation/hf_cases.sh`) must be within issue #5's tolerance on every
//! phase: peak allocated within 0.5%, peak reserved within 2%.
//!
//! One test per family, so a family's state is visible at a glance;
//! `cargo test -p vramscope-models --test integration gpu_fixtures:: -- --nocapture` prints
//! each case's differences.

use vramscope_models::{estimate, EstimateOptions, PhaseFigures};
use vramscope_testkit::fixture::{self, Case, SETS};

use crate::common;
use common::{refused, ROOT};

/// Cases outside issue #5's tolerance, with bounds on their worst phase's
/// allocated and reserved errors, and why. The test fails if one comes back
/// inside (so the list cannot go stale) or goes past a bound.
///
/// - `blind_cudnn_libraries/llama_527725e0_train_bf16_adamw_b3_s512` (13.277% reserved,
///   `forward1`, over: one 188 MiB segment the GPU does not make; 0.127%
///   allocated): segment placement alone, as `gpu_traces` shows (its
///   requests equal the GPU's, and on the GPU's own segment addresses every
///   phase is exact). A small bf16 model: on the GPU its first 20 MiB chunks
///   of `forward0` lie at B-320 and B-480, under what the kernels loaded at
///   their first use map of host memory (their images: glibc maps each from
///   its 3.67 MiB threshold up, top-down into the context's released
///   range), which the simulated driver does not lay out
///   (`fixtures/va_maps/README.md`); the twin puts them at B-128 and below
///   every mapping. The GPU does not repeat it: of ten more runs
///   (`repeat_h100.jsonl`), two gave the fixture's figures
///   (`repeated_runs_against_the_gpus_most_frequent_outcome`).
const KNOWN_OUTSIDE: &[(&str, f64, f64)] =
    &[("llama_527725e0_train_bf16_adamw_b3_s512", 0.0013, 0.1328)];

/// Cases where the twin takes a size it has no measurement for, and says
/// so (`Estimate::unmeasured`); every other case must have none.
/// The two ViTs of `fixtures/unseen/blind_new_configs_2`, whose patch embeddings
/// (K 384 at P 16 / 192 px, K 2048 at P 32 / 448 px) the table does not
/// hold: the twin takes no workspace there and says so; their figures are
/// exact nonetheless.
const UNMEASURED: &[&str] = &[
    "vit_8f8ecd8c_infer_bf16_adamw_b16",
    "vit_cdd9b0d3_train_bf16_sgdm_b24",
];

/// Every recorded case with its fixtures' directory, but those PyTorch
/// refused.
fn cases() -> Vec<(Case, &'static str)> {
    all_cases()
        .into_iter()
        .filter(|(c, dir)| !refused(dir, &c.name))
        .collect()
}

fn all_cases() -> Vec<(Case, &'static str)> {
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

/// Workloads PyTorch refused to build must be refused by the twin too, for
/// the same field: the two Phi-3s of `fixtures/unseen/blind_new_configs` whose
/// vocabulary (8192, 32000) does not hold the class's default
/// `pad_token_id` (32000), where `nn.Embedding` raised "Padding_idx must be
/// within num_embeddings".
#[test]
fn refused_by_pytorch_and_by_the_twin() {
    let mut n = 0;
    for (case, dir) in all_cases() {
        if !refused(dir, &case.name) {
            continue;
        }
        n += 1;
        let why =
            std::fs::read_to_string(format!("{ROOT}/{dir}/{}.refused.txt", case.name)).unwrap();
        assert!(
            why.contains("Padding_idx must be within num_embeddings"),
            "{why}"
        );
        let text = std::fs::read_to_string(format!("{ROOT}/{}", list_of(dir))).unwrap();
        let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
        let config = raw
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == case.name.as_str())
            .unwrap()["config"]
            .clone();
        let config = vramscope_models::HfConfig::from_value(config).unwrap();
        match estimate(&config, &case.workload, &EstimateOptions::default()) {
            Ok(_) => panic!("{}: PyTorch refused it, the twin answered", case.name),
            Err(e) => assert!(e.to_string().contains("pad_token_id"), "{}: {e}", case.name),
        }
    }
    assert_eq!(n, 2);
}

fn list_of(dir: &str) -> &'static str {
    SETS.iter().find(|(_, d)| *d == dir).unwrap().0
}

/// Run every case of the set in `set` (its fixture directory) whose name
/// starts with `prefix`; panic listing those outside the tolerance.
fn check(set: &str, prefix: &str) {
    let mut bad = Vec::new();
    let mut n = 0;
    for (case, dir) in cases() {
        if dir != set || !case.name.starts_with(prefix) {
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
                if est.unmeasured.is_empty() == UNMEASURED.contains(&case.name.as_str()) {
                    bad.push(format!(
                        "{}: unmeasured sizes {:?}",
                        case.name, est.unmeasured
                    ));
                }
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
                if let Some((_, alloc_bound, reserved_bound)) = known {
                    if acc.acceptable() {
                        bad.push(format!(
                            "{}: known to be outside the tolerance, now inside: take it off KNOWN_OUTSIDE",
                            case.name
                        ));
                    } else if acc.worst_peak_allocated > *alloc_bound
                        || acc.worst_peak_reserved > *reserved_bound
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
    assert!(n > 0, "no case of {set} matches {prefix:?}");
    assert!(bad.is_empty(), "outside the tolerance:\n{}", bad.join("\n"));
}

#[test]
fn llama() {
    check("fixtures/estimate", "llama_");
}

#[test]
fn mistral() {
    check("fixtures/estimate", "mistral_");
}

#[test]
fn qwen2() {
    check("fixtures/estimate", "qwen2_");
}

#[test]
fn qwen3() {
    check("fixtures/estimate", "qwen3_");
}

#[test]
fn phi3() {
    check("fixtures/estimate", "phi3_");
}

#[test]
fn gemma2() {
    check("fixtures/estimate", "gemma2_");
}

#[test]
fn gpt2() {
    check("fixtures/estimate", "gpt2_");
}

#[test]
fn bert() {
    check("fixtures/estimate", "bert_");
}

#[test]
fn roberta() {
    check("fixtures/estimate", "roberta_");
}

#[test]
fn vit() {
    check("fixtures/estimate", "vit_");
}

/// `fixtures/unseen/shapes_and_settings`: new widths, depths, head counts and
/// dims; batch 2-32, sequence 128-2048; Qwen2 fp32, plain SGD, Adam on bf16,
/// checkpointing every 2nd layer, `expandable_segments`, `max_split_size_mb`.
#[test]
fn unseen_shapes_and_settings() {
    check("fixtures/unseen/shapes_and_settings", "");
}

/// `fixtures/unseen/presets_odd_lengths`: the presets of real models, sequence
/// lengths not multiples of 64, fp16 weights and autocast, head dim 96, sliding
/// windows shorter than the sequence, ViT at 384 px.
#[test]
fn unseen_presets_odd_lengths() {
    check("fixtures/unseen/presets_odd_lengths", "");
}

/// `fixtures/unseen/presets_full_size`: presets at their real size
/// (Llama-3.1-8B, GPT2-XL, ...).
#[test]
fn unseen_presets_full_size() {
    check("fixtures/unseen/presets_full_size", "");
}

/// `fixtures/unseen/largest_batch_bisections`: training workloads bisected for
/// their largest batch after the driver placement (`vramscope plan`).
#[test]
fn unseen_largest_batch_bisections() {
    check("fixtures/unseen/largest_batch_bisections", "");
}

/// `fixtures/unseen/presets_full_size_rest`: the presets the third set could
/// not record, at real size.
#[test]
fn unseen_presets_full_size_rest() {
    check("fixtures/unseen/presets_full_size_rest", "");
}

/// `fixtures/unseen/head_dim_256`: attention heads 256 wide (cuDNN attention on
/// sm 9.0).
#[test]
fn unseen_head_dim_256() {
    check("fixtures/unseen/head_dim_256", "");
}

/// `fixtures/unseen/config_code_paths`: config fields that change the model's
/// code path (projection biases, sliding windows, upcast flags, ...).
#[test]
fn unseen_config_code_paths() {
    check("fixtures/unseen/config_code_paths", "");
}

/// `fixtures/unseen/settings_combined`: workload settings used only apart
/// before, put together; sequence length 1; 3-4 steps.
#[test]
fn unseen_settings_combined() {
    check("fixtures/unseen/settings_combined", "");
}

/// `fixtures/unseen/extreme_fields_and_shapes`: one KV head, sequence
/// 4096-8192, `n_inner` and relu, fp16 Gemma-2, batch 100 ViT.
#[test]
fn unseen_extreme_fields_and_shapes() {
    check("fixtures/unseen/extreme_fields_and_shapes", "");
}

/// `fixtures/unseen/hub_config_files`: config.json files as the Hub publishes
/// them, every field included.
#[test]
fn unseen_hub_config_files() {
    check("fixtures/unseen/hub_config_files", "");
}

/// `fixtures/unseen/small_training_placement`: small models in training, where
/// segment placement decides.
#[test]
fn unseen_small_training_placement() {
    check("fixtures/unseen/small_training_placement", "");
}

/// `fixtures/unseen/blind_driver_rule6`: a blind test of the driver placement's
/// rule 6.
#[test]
fn unseen_blind_driver_rule6() {
    check("fixtures/unseen/blind_driver_rule6", "");
}

/// `fixtures/unseen/presets_least_used_options`: the presets' real shapes with
/// the options least used (fp16, fp16 autocast, 7-9B presets cut to 2-4
/// layers).
#[test]
fn unseen_presets_least_used_options() {
    check("fixtures/unseen/presets_least_used_options", "");
}

/// `fixtures/unseen/driver_rule7`: Qwen2-7B cut to 2-4 layers, where the driver
/// placement's rule 7 changes the answer.
#[test]
fn unseen_driver_rule7() {
    check("fixtures/unseen/driver_rule7", "");
}

/// `fixtures/unseen/blind_forward0_mappings`: a blind test of `forward0`'s
/// driver mappings, two workloads per family (`answers.txt`).
#[test]
fn unseen_blind_forward0_mappings() {
    check("fixtures/unseen/blind_forward0_mappings", "");
}

/// `fixtures/unseen/blind_cudnn_libraries`: a blind test of cuDNN's libraries
/// in the address space (`answers.txt`).
#[test]
fn unseen_blind_cudnn_libraries() {
    check("fixtures/unseen/blind_cudnn_libraries", "");
}

/// `fixtures/unseen/blind_new_configs`: a blind test on configs no set had
/// (`validation/blind_gen.py 17 new`, `answers.txt`).
#[test]
fn unseen_blind_new_configs() {
    check("fixtures/unseen/blind_new_configs", "");
}

/// `fixtures/unseen/blind_new_configs_2`: a second blind test on configs no set
/// had (`validation/blind_gen.py 18 new`, `answers.txt`).
#[test]
fn unseen_blind_new_configs_2() {
    check("fixtures/unseen/blind_new_configs_2", "");
}

/// Inference under `torch.inference_mode()` and with grad enabled
/// (`validation/grad_cases.json`, `fixtures/estimate_grad`).
#[test]
fn grad_modes() {
    check("fixtures/estimate_grad", "g_");
}

/// The workloads whose recorded figures differ from the GPU's own runs: in
/// `fixtures/estimate/repeat_h100.jsonl` (`validation/estimate_repeat.py`,
/// each run a fresh process as `hf_cases.sh` records), the name, how many
/// runs gave the recorded figures in every phase, and how many runs there
/// are. Every other workload there gave its recorded figures in every run
/// (`fixtures/estimate/README.md` says which runs were made and why).
const GPU_VARIES: &[(&str, usize, usize)] = &[
    ("llama_527725e0_train_bf16_adamw_b3_s512", 2, 10),
    ("gemma2_f48b44d9_train_fp32_sgd_b2_s384", 1, 3),
    ("mistral_15513d0a_train_bf16_sgd_ckpt_b8_s128", 0, 3),
    ("roberta_3c4c75b3_train_fp32_ac_adam_b4_s512", 2, 3),
];

/// A phase's four figures as `repeat_h100.jsonl` holds them.
type Outcome = Vec<(String, [i64; 4])>;

/// The figures of an outcome, to compare with (no requested bytes there).
fn figures_of(o: &Outcome) -> Vec<PhaseFigures> {
    o.iter()
        .map(|(name, f)| PhaseFigures {
            name: name.clone(),
            allocated_bytes: f[0],
            peak_allocated_bytes: f[1],
            reserved_bytes: f[2],
            peak_reserved_bytes: f[3],
            requested_bytes: -1,
        })
        .collect()
}

fn outcome_of(phases: &[PhaseFigures]) -> Outcome {
    phases
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                [
                    p.allocated_bytes,
                    p.peak_allocated_bytes,
                    p.reserved_bytes,
                    p.peak_reserved_bytes,
                ],
            )
        })
        .collect()
}

/// The GPU's runs of a workload, fresh process after fresh process, do not
/// always give the same figures (segment placement follows the process's
/// own mappings). For each workload of `repeat_h100.jsonl`: its outcomes
/// (the distinct per-phase figures over the fixture and its runs) and how
/// often each came. The twin must be within issue #5's tolerance of the
/// GPU's most frequent outcome (ties go to the fixture); its error against
/// every outcome is printed.
#[test]
fn repeated_runs_against_the_gpus_most_frequent_outcome() {
    let text =
        std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/repeat_h100.jsonl")).unwrap();
    let dirs = cases();
    let mut by: Vec<(String, Vec<Outcome>)> = Vec::new();
    for line in text.lines() {
        let run: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = run["name"].as_str().unwrap();
        assert_eq!(run["rc"], 0, "{name}: {line}");
        let phases: Outcome = run["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let f = |i: usize| p[i].as_i64().unwrap();
                (p[0].as_str().unwrap().to_owned(), [f(1), f(2), f(3), f(4)])
            })
            .collect();
        match by.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => v.push(phases),
            None => by.push((name.to_owned(), vec![phases])),
        }
    }
    assert_eq!(by.iter().map(|(_, v)| v.len()).sum::<usize>(), 123);
    let mut varies = Vec::new();
    let mut bad = Vec::new();
    for (name, runs) in &by {
        let (case, dir) = dirs.iter().find(|(c, _)| &c.name == name).unwrap();
        let rec = fixture::recorded(
            &std::fs::read_to_string(format!("{ROOT}/{dir}/{name}.json")).unwrap(),
        )
        .unwrap();
        let recorded = outcome_of(&rec.phases);
        let same = runs.iter().filter(|r| **r == recorded).count();
        if same < runs.len() {
            varies.push((name.as_str(), same, runs.len()));
        }
        // the outcomes, the fixture's first, with their counts
        let mut outcomes: Vec<(Outcome, usize)> = vec![(recorded, 1)];
        for r in runs {
            match outcomes.iter_mut().find(|(o, _)| o == r) {
                Some((_, k)) => *k += 1,
                None => outcomes.push((r.clone(), 1)),
            }
        }
        let opts = EstimateOptions {
            allocator: case.allocator.clone(),
            ..EstimateOptions::default()
        };
        let est = estimate(&rec.config, &case.workload, &opts).unwrap();
        let twin = outcome_of(&est.phases);
        // the most frequent; the fixture on a tie
        let modal =
            (0..outcomes.len()).fold(0, |m, i| if outcomes[i].1 > outcomes[m].1 { i } else { m });
        for (i, (o, k)) in outcomes.iter().enumerate() {
            let acc = fixture::compare(&est, &figures_of(o));
            let exact = twin.iter().zip(o).filter(|(a, b)| a == b).count();
            println!(
                "{name:<52} {k:>2} of {:>2}{}{} twin exact {exact:>2}/{:<2} worst phase alloc {:.4}% reserved {:.4}%",
                runs.len() + 1,
                if i == 0 { " fixture" } else { "        " },
                if i == modal { " most" } else { "     " },
                o.len(),
                acc.worst_peak_allocated * 100.0,
                acc.worst_peak_reserved * 100.0
            );
            if i == modal && !acc.acceptable() {
                bad.push(name.clone());
            }
        }
    }
    assert_eq!(
        varies, GPU_VARIES,
        "workloads whose runs differ from the fixture"
    );
    assert!(
        bad.is_empty(),
        "outside the tolerance of the GPU's most frequent outcome: {bad:?}"
    );
}

/// The LLM sets of `validation/llm/` recorded on an H200 by
/// `llm_cases.py`, answered blind (`answers_h200.jsonl`, committed before
/// the GPU ran them): (case list, the GPU's phase lines). Every phase
/// within the tolerance, and every phase exact unless listed in the set's
/// README.
const LLM_SETS: [(&str, &str); 9] = [
    (
        "validation/llm/optim_cases.json",
        "fixtures/llm/optim/gpu_h200.jsonl",
    ),
    (
        "validation/llm/generate_cases.json",
        "fixtures/llm/generate/gpu_h200.jsonl",
    ),
    (
        "validation/llm/lora_cases.json",
        "fixtures/llm/lora/gpu_h200.jsonl",
    ),
    (
        "validation/llm/window_cases.json",
        "fixtures/llm/window/gpu_h200.jsonl",
    ),
    (
        "validation/llm/moe_cases.json",
        "fixtures/llm/moe/gpu_h200.jsonl",
    ),
    (
        "validation/llm/moe_train_cases.json",
        "fixtures/llm/moe_train/gpu_h200.jsonl",
    ),
    (
        "validation/llm/static_cases.json",
        "fixtures/llm/static/gpu_h200.jsonl",
    ),
    (
        "validation/llm/adafactor_cases.json",
        "fixtures/llm/adafactor/gpu_h200.jsonl",
    ),
    (
        "validation/llm/gemma_cases.json",
        "fixtures/llm/gemma/gpu_h200.jsonl",
    ),
];

/// Workloads of the LLM sets that the twin refuses by name (recorded on the
/// GPU for when it models them): the estimate must fail as unsupported.
const LLM_REFUSED: &[&str] = &[
    // LoRA without target_modules on mixtral: peft 0.21.2 raises under
    // transformers 5 (NoMatchingPeftModuleError), and so does the twin
    "a_mixtral_bf16_lora_qv_adamw",
];

/// Run every case of an LLM set on the twin's H200; (exact phases, all
/// phases), panicking on one outside the tolerance.
fn check_llm_set(list: &str, recorded: &str) -> (usize, usize) {
    let cases_text = std::fs::read_to_string(format!("{ROOT}/{list}")).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&cases_text).unwrap();
    let gpu = fixture::phase_lines(&std::fs::read_to_string(format!("{ROOT}/{recorded}")).unwrap())
        .unwrap();
    let opts = EstimateOptions {
        profile: vramscope_engine::DeviceProfile::h200_torch_2_11(),
        ..EstimateOptions::default()
    };
    let (mut exact, mut all) = (0, 0);
    let mut bad = Vec::new();
    for case in fixture::cases(&cases_text).unwrap() {
        let config = raw
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == case.name.as_str())
            .unwrap()["config"]
            .clone();
        let config = vramscope_models::HfConfig::from_value(config).unwrap();
        if LLM_REFUSED.contains(&case.name.as_str()) {
            let e = estimate(&config, &case.workload, &opts).map(|_| ());
            assert!(
                e.as_ref()
                    .is_err_and(|e| e.to_string().contains("not supported")),
                "{}: {e:?}",
                case.name
            );
            continue;
        }
        let phases = &gpu.iter().find(|(c, _)| *c == case.name).unwrap().1;
        let est = estimate(&config, &case.workload, &opts).unwrap();
        let acc = fixture::compare(&est, phases);
        println!(
            "{:<40} exact {:>2}/{:<2} worst phase alloc {:.4}% reserved {:.4}%",
            case.name,
            acc.exact_phases,
            acc.phases,
            acc.worst_peak_allocated * 100.0,
            acc.worst_peak_reserved * 100.0
        );
        exact += acc.exact_phases;
        all += acc.phases;
        if !acc.acceptable() || est.phases.len() != phases.len() {
            bad.push(format!("{}: {:?}", case.name, acc.diffs));
        }
    }
    assert!(bad.is_empty(), "outside the tolerance:\n{}", bad.join("\n"));
    (exact, all)
}

/// Optimizers in every implementation (`fixtures/llm/optim`): 182 of 182
/// phases exact.
#[test]
fn llm_optimizers() {
    let (list, recorded) = LLM_SETS[0];
    assert_eq!(check_llm_set(list, recorded), (182, 182));
}

/// `torch.optim.Adafactor` (for-loop and foreach; llama, gpt2, qwen2,
/// mixtral), LoRA on all linear layers (`fixtures/llm/adafactor`): 78 of 78
/// phases exact.
#[test]
fn llm_adafactor() {
    let (list, recorded) = LLM_SETS[7];
    assert_eq!(check_llm_set(list, recorded), (78, 78));
}

/// `model.generate()` with a DynamicCache (`fixtures/llm/generate`): 30 of
/// 30 phases exact.
#[test]
fn llm_generate() {
    let (list, recorded) = LLM_SETS[1];
    assert_eq!(check_llm_set(list, recorded), (30, 30));
}

/// `model.generate()` with a StaticCache (`fixtures/llm/static`): 21 of 21
/// phases exact (the last one since the split-KV workspace of cuDNN's
/// one-query attention).
#[test]
fn llm_static_cache() {
    let (list, recorded) = LLM_SETS[6];
    assert_eq!(check_llm_set(list, recorded), (21, 21));
}

/// peft LoRA training (`fixtures/llm/lora`): 91 of 91 phases exact.
#[test]
fn llm_lora() {
    let (list, recorded) = LLM_SETS[2];
    assert_eq!(check_llm_set(list, recorded), (91, 91));
}

/// `gemma3_text` training and inference, `mixtral` and `qwen3_moe`
/// training, inference and generation (`fixtures/llm/moe`): 60 of 60
/// phases exact.
#[test]
fn llm_moe() {
    let (list, recorded) = LLM_SETS[4];
    assert_eq!(check_llm_set(list, recorded), (60, 60));
}

/// `mixtral` and `qwen3_moe` training (bf16, fp32, checkpointing), 256
/// experts, fp32 generation (`fixtures/llm/moe_train`): 42 of 42 phases
/// exact, as answered blind.
#[test]
fn llm_moe_train() {
    let (list, recorded) = LLM_SETS[5];
    assert_eq!(check_llm_set(list, recorded), (42, 42));
}

/// Sliding windows past the window and per-step figures
/// (`fixtures/llm/window`): 18 of 18 phases exact (the last one since the
/// split-KV workspace of cuDNN's one-query attention), and 262 of 262
/// decode steps exact in all five figures.
#[test]
fn llm_window() {
    let (list, recorded) = LLM_SETS[3];
    assert_eq!(check_llm_set(list, recorded), (18, 18));
    assert_eq!(check_llm_steps(list, recorded), (262, 262));
}

/// `model.generate()` on gemma2 and gemma3_text (dynamic and static caches,
/// inside and past the window), and LoRA on mixtral and qwen3_moe with
/// explicit targets (`fixtures/llm/gemma`): 47 of 47 phases and 192 of 192
/// decode steps exact, as answered blind.
#[test]
fn llm_gemma() {
    let (list, recorded) = LLM_SETS[8];
    assert_eq!(check_llm_set(list, recorded), (47, 47));
    assert_eq!(check_llm_steps(list, recorded), (192, 192));
}

/// The decode steps a set recorded (`per_step`) against the twin's
/// `decode_steps`: (exact in all five figures, all).
fn check_llm_steps(list: &str, recorded: &str) -> (usize, usize) {
    let cases_text = std::fs::read_to_string(format!("{ROOT}/{list}")).unwrap();
    let raw: Vec<serde_json::Value> = serde_json::from_str(&cases_text).unwrap();
    let gpu = std::fs::read_to_string(format!("{ROOT}/{recorded}")).unwrap();
    let steps: Vec<serde_json::Value> = gpu
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("step").is_some())
        .collect();
    let opts = EstimateOptions {
        profile: vramscope_engine::DeviceProfile::h200_torch_2_11(),
        ..EstimateOptions::default()
    };
    let (mut exact, mut all) = (0, 0);
    for case in fixture::cases(&cases_text).unwrap() {
        let recorded: Vec<&serde_json::Value> = steps
            .iter()
            .filter(|v| v["case"] == case.name.as_str())
            .collect();
        if recorded.is_empty() {
            continue;
        }
        let config = raw
            .iter()
            .find(|c| c["name"] == case.name.as_str())
            .unwrap()["config"]
            .clone();
        let config = vramscope_models::HfConfig::from_value(config).unwrap();
        let est = estimate(&config, &case.workload, &opts).unwrap();
        for g in recorded {
            let t = est.decode_steps[g["step"].as_u64().unwrap() as usize];
            let n = |k: &str| g[k].as_i64().unwrap();
            all += 1;
            if (t.allocated_bytes, t.peak_allocated_bytes, t.reserved_bytes)
                == (
                    n("allocated_bytes"),
                    n("peak_allocated_bytes"),
                    n("reserved_bytes"),
                )
                && (t.peak_reserved_bytes, t.requested_bytes)
                    == (n("peak_reserved_bytes"), n("requested_bytes"))
            {
                exact += 1;
            }
        }
    }
    (exact, all)
}
