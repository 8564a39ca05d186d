//! Every rank under FSDP2 and DDP against the GPUs (issue #33): each case of
//! `validation/multi/multi_cases.json`, recorded on 2 H200s by
//! `validation/multi/record.sh` (`fixtures/multi/multi_h200_n2.jsonl`, one
//! line per rank per phase), must be within 0.5% peak allocated and 2% peak
//! reserved in every phase of every rank, and exact in all four figures
//! except where [`INEXACT`] says why not.
//!
//! `cargo test -p vramscope-models --test integration multi_gpu:: -- --nocapture` prints
//! each case's worst phase.

use serde_json::Value;
use vramscope_engine::{DType, DeviceProfile};
use vramscope_models::{
    estimate, DdpConfig, EstimateOptions, FsdpConfig, HfConfig, Parallel, Task, Workload,
};

/// The repository's root, where `validation/` and `fixtures/` lie.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Cases within the tolerance but not exact, with the most their peak
/// allocated may be off (a fraction), and why.
///
/// Both checkpoint every layer, and the twin's allocator trace equals the
/// GPU's in every action, size and stream (`validation/multi/trace_diff.py`):
/// what differs is the order of the segments' addresses. Under NCCL the
/// driver lays the process's address space out otherwise than the
/// single-process placement the twin simulates (`driver_va.rs`), and the
/// best fit breaks ties between equal free blocks by address.
const INEXACT: &[(&str, f64)] = &[
    ("fsdp_llama_mp_ckpt", 0.0021),
    ("fsdp_llama_fp32_ckpt_noreshard", 0.0013),
    // the same requests in the same order as the GPU's trace: a block is
    // placed where the remainder is left unsplit
    ("ddp_gpt2_fp32", 0.0032),
    ("ddp_llama_fp32", 0.0009),
];

/// On 4 H200s: the same placement on every rank of the two DDP Llamas
/// (the step's peak 1 MiB higher on the GPU) and GPT-2 (1 to 3 MiB).
const INEXACT_N4: &[(&str, f64)] = &[
    ("ddp_llama_fp32", 0.0009),
    ("ddp_llama_default_buckets", 0.0009),
    ("ddp_gpt2_fp32", 0.0032),
];

/// The session-6 set (`multi_cases_s6.json`, answered blind, recorded on 2
/// H200s in sessions 9 and 11). Each of these has the same allocator trace
/// as the GPU's (`validation/multi/trace_diff.py --cases`, every alloc,
/// free and segment in order, with sizes and streams, on both ranks) up to
/// the first block best fit takes from another segment: the GPU's segments
/// lie in another address order (in these NCCL processes 2 MiB segments
/// land in low ranges such as 0x4a2.. and 0x41.., which the single-process
/// placement of `driver_va.rs` never uses), and best fit breaks ties
/// between equal free blocks by address; a block left unsplit then moves
/// the allocated bytes (ViT: one more 14 MiB segment on the GPU in
/// `forward1`).
const INEXACT_S6: &[(&str, f64)] = &[
    ("ddp_vit_fp32", 0.0039),
    ("fsdp_llama_mp_accum3", 0.0020),
    ("ddp_llama_fp32_accum3", 0.0009),
    ("fsdp_llama_mp_autocast_ckpt", 0.0020),
    // 1 MiB less allocated at the end of `backward0.0` on both ranks, peaks
    // exact
    ("ddp_gpt2_fp32_view_accum2", 0.0001),
    // 1.1 to 3.4 MiB under from `backward0` on both ranks (the same in
    // `vramscope run`): placement, as its 4-GPU traces show
    // ([`INEXACT_S6_N4`])
    ("ddp_phi3_bf16", 0.0056),
];

/// The session-7 set (`multi_cases_s7.json`), as [`INEXACT_S6`]:
/// `ddp_mixtral_bf16`'s trace equals the GPU's in every entry since the
/// saved tensors of `GroupedMmBackward0` and `DivBackward0` are released in
/// the generated order; `fsdp_qwen2_bf16_rmsprop` has no trace (2 MiB more
/// reserved in `backward0` only, both ranks; so does `vramscope run`);
/// `ddp_llama_lora_bf16` holds 256 KiB more in `forward1` on both ranks:
/// the first bucket (65,536 float32 adapter parameters) outliving the
/// rebuild, as [`WATCHDOG_LATE`] describes.
const INEXACT_S7: &[(&str, f64)] = &[
    ("ddp_mixtral_bf16", 0.0022),
    ("fsdp_qwen2_bf16_rmsprop", 0.0001),
    ("ddp_llama_lora_bf16", 0.0003),
];

/// The session-6 set on 4 H200s (`multi_s6_h200_n4.jsonl`, with every
/// rank's trace): as [`INEXACT_S6`]. The traces explain `ddp_phi3_bf16`'s 1
/// to 3.4 MiB (also on 2): ranks 0 and 2 equal the GPU's in every entry
/// (`trace_diff.py --full`), and the first other block is a 6 MiB request
/// the GPU serves from a 7 MiB free block (its segments made from DDP's
/// first bucket on lie bottom-up in the order made, below the load's; the
/// twin's otherwise); ranks 1 and 3 are the same but for the first bucket's
/// free ([`WATCHDOG_LATE_S6_N4`]).
const INEXACT_S6_N4: &[(&str, f64)] = &[
    ("ddp_phi3_bf16", 0.0056),
    ("ddp_vit_fp32", 0.0039),
    ("fsdp_llama_mp_accum3", 0.0006),
    ("ddp_llama_fp32_accum3", 0.0009),
    ("ddp_gpt2_fp32_view_accum2", 0.0001),
];

/// The session-7 set on 4 H200s: `ddp_mixtral_bf16`'s trace equals the
/// GPU's in every entry on every rank (placement, as on 2).
const INEXACT_S7_N4: &[(&str, f64)] = &[("ddp_mixtral_bf16", 0.0022)];

/// Watchdog-late runs of the two sets on 4 H200s: 13 of the 48 runs of the
/// 12 DDP training cases without `find_unused_parameters`. On each, the
/// twin's allocations and frees equal the GPU's in every entry once the
/// first bucket's free is left out of both (the GPU frees it in the second
/// iteration's backward, in `forward2` or `backward2`, or not before the run
/// ends: ranks 0 to 2 of `ddp_llama_bf16_sgd`, rank 1 of `ddp_vit_fp32`).
const WATCHDOG_LATE_S6_N4: &[(&str, i64)] = &[
    ("ddp_phi3_bf16", 1),
    ("ddp_phi3_bf16", 3),
    ("ddp_roberta_bf16", 1),
    ("ddp_vit_fp32", 0),
    ("ddp_vit_fp32", 1),
    ("ddp_llama_fp32_accum3", 0),
    ("ddp_llama_fp32_accum3", 3),
    ("ddp_gpt2_fp32_view_accum2", 0),
    ("ddp_gpt2_fp32_view_accum2", 3),
];
const WATCHDOG_LATE_S7_N4: &[(&str, i64)] = &[
    ("ddp_llama_bf16_sgd", 0),
    ("ddp_llama_bf16_sgd", 1),
    ("ddp_llama_bf16_sgd", 2),
    ("ddp_llama_bf16_sgd", 3),
];

/// Watchdog-late runs of the session-6 and session-7 sets (the first bucket
/// is every parameter's bytes in these).
const WATCHDOG_LATE_S6: &[(&str, i64)] = &[
    ("ddp_gemma2_fp32_view", 1),
    ("ddp_gpt2_fp32_view_accum2", 0),
];
const WATCHDOG_LATE_S7: &[(&str, i64)] = &[("ddp_llama_bf16_sgd", 1)];

/// The session-16 set (`multi_cases_s16.json`, answered blind, recorded
/// on 2 H200s in session 16). Each has the same allocator trace as the
/// GPU's on both ranks (`trace_diff.py --full`, or `--late` on a late rank)
/// and differs in a block best fit took from another segment, as
/// [`INEXACT_S6`]: the DDP Phi-3 with SGD's momentum (0.25 to 1.75 MiB from
/// `backward0`) and the GQA Llama with 10 MiB buckets (0.5 to 3.2 MiB, its
/// late rank's held bound 3.2 MiB under the GPU's peak); the Qwen3-MoE
/// under FSDP2 reads one more 2 MiB small-pool segment from `backward0` to
/// `zero_grad0`, its allocated bytes exact.
const INEXACT_S16: &[(&str, f64)] = &[
    ("ddp_phi3_fp32_sgdm_b2_s768", 0.0020),
    ("ddp_llama_gqa_fp32_bucket10", 0.0030),
    ("fsdp_qwen3moe_mp_bf16", 0.0),
];

/// Watchdog-late runs of the session-16 set: 7 of its 18 DDP runs.
const WATCHDOG_LATE_S16: &[(&str, i64)] = &[
    ("ddp_llama_gqa_fp32_bucket10", 0),
    ("ddp_mistral_bf16_default_buckets_ckpt", 0),
    ("ddp_mistral_bf16_default_buckets_ckpt", 1),
    ("ddp_qwen2_lora_fp32_view", 0),
    ("ddp_phi3_fp32_sgdm_b2_s768", 1),
    ("ddp_gemma2_bf16_bucket50", 0),
    ("ddp_gemma2_bf16_bucket50", 1),
];

/// DDP runs whose first-iteration bucket the GPU freed after the bucket
/// rebuild rather than in it (case, rank). ProcessGroupNCCL keeps a
/// collective's tensors on a shelf until its watchdog thread, which polls,
/// has seen the collective complete and the next collective clears the
/// shelf; the twin frees the bucket where the reducer drops it
/// (`initialize_buckets`), as 8 of the 12 recorded runs do. In these runs
/// the phases up to `zero_grad0` are held exact, and from `forward1` the
/// allocated bytes the twin's or the twin's plus that bucket, within 0.5%.
const WATCHDOG_LATE: &[(&str, i64)] = &[
    ("ddp_llama_fp32", 1),
    ("ddp_llama_bf16", 1),
    ("ddp_llama_fp32_bucket5", 0),
    ("ddp_llama_fp32_bucket5", 1),
];

/// As [`WATCHDOG_LATE`], on 4 H200s (5 of 20 DDP runs).
const WATCHDOG_LATE_N4: &[(&str, i64)] = &[
    ("ddp_llama_fp32", 3),
    ("ddp_llama_default_buckets", 3),
    ("ddp_llama_fp32_view", 3),
    ("ddp_qwen2_bf16_ckpt", 0),
    ("ddp_gpt2_fp32", 1),
];

const FIGURES: [&str; 4] = [
    "allocated_bytes",
    "peak_allocated_bytes",
    "reserved_bytes",
    "peak_reserved_bytes",
];

/// The workload of a case of `multi_cases*.json` as rank `rank` of `world`:
/// the fields the sets share with `validation/llm`'s cases (task, mode,
/// optimizer, LoRA, autocast, ...) read as `vramscope_testkit::fixture`
/// reads those, then the accumulation and the wrapper.
fn workload(case: &Value, world: i64, rank: i64) -> Workload {
    let dtype = |s: &str| match s {
        "bf16" => DType::BF16,
        "fp16" => DType::F16,
        _ => DType::F32,
    };
    let mut c = case.clone();
    for (k, v) in [("task", "causal"), ("mode", "train")] {
        if c.get(k).is_none() {
            c[k] = Value::from(v);
        }
    }
    let mut w = vramscope_testkit::fixture::cases(&Value::Array(vec![c]).to_string())
        .unwrap()
        .remove(0)
        .workload;
    w.accumulation = case["accumulation"].as_u64().unwrap_or(1) as usize;
    w.parallel = Some(if case["parallel"] == "ddp" {
        // multi_cases.py passes bucket_cap_mb always
        Parallel::Ddp(DdpConfig {
            world,
            // (25 unless given; `null` is DDP's default)
            bucket_cap_mb: match case.get("bucket_mb") {
                None => Some(25.0),
                Some(v) => v.as_f64(),
            },
            gradient_as_bucket_view: case["grad_as_bucket_view"].as_bool().unwrap_or(false),
            first_buckets_held: false,
            find_unused_parameters: case["find_unused"].as_bool().unwrap_or(false),
        })
    } else {
        Parallel::Fsdp(FsdpConfig {
            world,
            rank,
            param_dtype: case["param_dtype"].as_str().map(dtype),
            reshard_after_forward: case["reshard"].as_bool().unwrap_or(true),
            cpu_offload: case["cpu_offload"].as_bool().unwrap_or(false),
        })
    });
    w
}

#[test]
fn every_rank_of_every_fsdp_and_ddp_case_against_two_h200s() {
    let checked = against(
        "multi_cases.json",
        "multi_h200_n2.jsonl",
        2,
        INEXACT,
        WATCHDOG_LATE,
    );
    assert!(checked >= 18 * 2 * 13, "only {checked} rank-phases checked");
}

/// The cases of `multi_cases_n4.json` on 4 H200s, whose answers the twin
/// gave before the GPUs ran them (`answers_h200_n4.jsonl`): the FSDP cases
/// were exact in every phase of every rank then already.
#[test]
fn every_rank_of_every_case_against_four_h200s() {
    let checked = against(
        "multi_cases_n4.json",
        "multi_h200_n4.jsonl",
        4,
        INEXACT_N4,
        WATCHDOG_LATE_N4,
    );
    assert!(checked >= 15 * 4 * 13, "only {checked} rank-phases checked");
}

/// The session-6 and session-7 sets on 2 H200s: FSDP2 and DDP of phi3,
/// gemma2, bert, roberta, vit; inference; accumulation; autocast; LoRA;
/// `find_unused_parameters`; other optimizers; Mixtral; `generate()`.
#[test]
fn every_rank_of_the_session_6_and_7_sets_against_two_h200s() {
    let s6 = against(
        "multi_cases_s6.json",
        "multi_s6_h200_n2.jsonl",
        2,
        INEXACT_S6,
        WATCHDOG_LATE_S6,
    );
    assert_eq!(s6, 424, "rank-phases of the session-6 set");
    let s7 = against(
        "multi_cases_s7.json",
        "multi_s7_h200_n2.jsonl",
        2,
        INEXACT_S7,
        WATCHDOG_LATE_S7,
    );
    assert_eq!(s7, 474, "rank-phases of the session-7 set");
}

/// The session-16 set on 2 H200s: Qwen3, Gemma3 and a Qwen3-MoE under
/// FSDP2, other sizes, sequences, batches, optimizers, bucket sizes.
#[test]
fn every_rank_of_the_session_16_set_against_two_h200s() {
    let s16 = against(
        "multi_cases_s16.json",
        "multi_s16_h200_n2.jsonl",
        2,
        INEXACT_S16,
        WATCHDOG_LATE_S16,
    );
    assert_eq!(s16, 468, "rank-phases of the session-16 set");
}

/// The session-6 and session-7 sets on 4 H200s
/// (`multi_s6_h200_n4.jsonl`, `multi_s7_h200_n4.jsonl`), answered blind in
/// sessions 6 and 7.
#[test]
fn every_rank_of_the_session_6_and_7_sets_against_four_h200s() {
    let s6 = against(
        "multi_cases_s6.json",
        "multi_s6_h200_n4.jsonl",
        4,
        INEXACT_S6_N4,
        WATCHDOG_LATE_S6_N4,
    );
    assert_eq!(s6, 848, "rank-phases of the session-6 set");
    let s7 = against(
        "multi_cases_s7.json",
        "multi_s7_h200_n4.jsonl",
        4,
        INEXACT_S7_N4,
        WATCHDOG_LATE_S7_N4,
    );
    assert_eq!(s7, 948, "rank-phases of the session-7 set");
}

/// Each case of `validation/multi/CASES` on every rank of `world` against
/// `fixtures/multi/FIXTURE`; returns the rank-phases checked.
fn against(
    cases: &str,
    fixture: &str,
    world: i64,
    inexact: &[(&str, f64)],
    late: &[(&str, i64)],
) -> usize {
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/validation/multi/{cases}")).unwrap(),
    )
    .unwrap();
    let recorded: Vec<Value> = std::fs::read_to_string(format!("{ROOT}/fixtures/multi/{fixture}"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let opts = EstimateOptions {
        profile: DeviceProfile::h200_torch_2_11(),
        ..EstimateOptions::default()
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let config = HfConfig::parse(&case["config"].to_string()).unwrap();
        let mut worst = (0.0f64, 0.0f64, String::new());
        let mut exact = true;
        // DDP's ranks run the same program (the workload has no rank): one
        // estimate serves them all
        let ddp = (case["parallel"] == "ddp")
            .then(|| estimate(&config, &workload(case, world, 0), &opts).unwrap());
        for rank in 0..world {
            let own;
            let est = match &ddp {
                Some(e) => e,
                None => {
                    own = estimate(&config, &workload(case, world, rank), &opts).unwrap();
                    &own
                }
            };
            let gpu: Vec<&Value> = recorded
                .iter()
                .filter(|l| l["case"] == name && l["rank"] == rank && l["phase"] != "init")
                .collect();
            assert_eq!(gpu.len(), est.phases.len(), "{name} rank {rank}: phases");
            let late = late.contains(&(name, rank));
            // the first phase after the bucket rebuild: `forward1` (or
            // `forward1.0` with accumulation)
            let rebuilt = gpu
                .iter()
                .position(|g| g["phase"].as_str().unwrap().starts_with("forward1"))
                .unwrap_or(gpu.len());
            for (k, (g, p)) in gpu.iter().zip(&est.phases).enumerate() {
                assert_eq!(g["phase"].as_str().unwrap(), p.name);
                let twin = [
                    p.allocated_bytes,
                    p.peak_allocated_bytes,
                    p.reserved_bytes,
                    p.peak_reserved_bytes,
                ];
                let at = |k: &str| g[k].as_i64().unwrap();
                if late && k >= rebuilt {
                    // from forward1 (phase 5) the GPU holds the first bucket
                    // (every parameter's bytes) until it frees it, or not
                    let bucket = est.parameter_bytes as i64;
                    for (f, t) in [
                        ("allocated_bytes", p.allocated_bytes),
                        ("peak_allocated_bytes", p.peak_allocated_bytes),
                    ] {
                        let d = at(f) - t;
                        if d.abs().min((d - bucket).abs()) as f64 > 0.005 * at(f) as f64 {
                            failures.push(format!("{name} rank {rank} {}: {f} {d:+}", p.name));
                        }
                    }
                    checked += 1;
                    continue;
                }
                exact &= FIGURES.iter().zip(twin).all(|(k, t)| at(k) == t);
                let ea = (p.peak_allocated_bytes - at("peak_allocated_bytes")) as f64
                    / at("peak_allocated_bytes") as f64;
                let er = (p.peak_reserved_bytes - at("peak_reserved_bytes")) as f64
                    / at("peak_reserved_bytes") as f64;
                if ea.abs() > worst.0.abs() || er.abs() > worst.1.abs() {
                    worst = (ea, er, format!("rank {rank} {}", p.name));
                }
                // a case listed with a bound past 0.5% is held to that bound
                let tolerance = inexact
                    .iter()
                    .find(|k| k.0 == name)
                    .map_or(0.005, |k| k.1.max(0.005));
                if ea.abs() > tolerance || er.abs() > 0.02 {
                    failures.push(format!(
                        "{name} rank {rank} {}: allocated {:+.3}%, reserved {:+.3}%",
                        p.name,
                        ea * 100.0,
                        er * 100.0
                    ));
                }
                checked += 1;
            }
        }
        println!(
            "{name:32} {} worst {}: allocated {:+.3}%, reserved {:+.3}%",
            if exact { "exact" } else { "     " },
            worst.2,
            worst.0 * 100.0,
            worst.1 * 100.0
        );
        match inexact.iter().find(|k| k.0 == name) {
            Some(&(_, bound)) => {
                if exact {
                    failures.push(format!("{name} is exact now: take it off INEXACT"));
                } else if worst.0.abs() > bound {
                    failures.push(format!(
                        "{name}: {:+.3}% allocated, past its bound {bound}",
                        worst.0 * 100.0
                    ));
                }
            }
            None if !exact => failures.push(format!("{name} is no longer exact")),
            None => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

/// Uneven shards (`torch.chunk`'s dim-0 cut, padded): the GPU recorded
/// GPT-2's odd vocabulary (50257 rows) on two ranks; the twin groups the
/// ranks that shard alike and runs one of each.
#[test]
fn ranks_with_uneven_shards_are_told_apart() {
    let gpt2 = HfConfig::parse(
        r#"{"model_type": "gpt2", "n_embd": 512, "n_layer": 4, "n_head": 8, "vocab_size": 50257}"#,
    )
    .unwrap();
    let classes =
        vramscope_models::parallel::fsdp::rank_classes(&gpt2, Task::Causal, 2, None).unwrap();
    assert_eq!(classes, vec![vec![0], vec![1]]);
    let llama = HfConfig::parse(
        r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408,
            "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 32000}"#,
    )
    .unwrap();
    let classes =
        vramscope_models::parallel::fsdp::rank_classes(&llama, Task::Causal, 8, None).unwrap();
    assert_eq!(classes, vec![(0..8).collect::<Vec<i64>>()]);
}

/// (case, phase, the GPU's bytes outside the allocator less the twin's, in
/// MiB), the same on 2 and 4 H200s: with checkpointing and no resharding
/// the fp32 Llama reads 2 MiB more after its first forward (what the others
/// take in their first backward comes a phase early); so do six cases of
/// the session-6 and 7 sets, and ViT's bf16 FSDP2 run reads 2 MiB less
/// after its first backward (a phase late); `generate()` under DDP reads 2
/// and 4 MiB more.
const OUTSIDE_KNOWN: &[(&str, &str, i64)] = &[
    ("fsdp_llama_fp32_ckpt_noreshard", "forward0", 2),
    ("fsdp_gemma2_bf16_ckpt", "forward0", 2),
    ("ddp_gemma2_fp32_view", "forward0", 2),
    ("fsdp_llama_lora_bf16", "forward0", 2),
    ("ddp_mistral_lora_fp32_ckpt", "forward0", 2),
    ("ddp_mixtral_bf16", "forward0", 2),
    ("fsdp_mixtral_mp_bf16", "forward0", 2),
    ("fsdp_vit_bf16", "backward0", -2),
    ("ddp_llama_bf16_generate", "prefill", 2),
    ("ddp_llama_bf16_generate", "decode", 4),
    // the session-16 set: six of its 18 cases, both ranks, the same share
    // a phase early
    ("ddp_llama_gqa_fp32_bucket10", "forward0", 2),
    ("fsdp_llama_fp32_b8_s256_adam", "forward0", 2),
    ("ddp_qwen2_lora_fp32_view", "forward0", 2),
    ("fsdp_qwen3moe_mp_bf16", "forward0", 2),
    ("fsdp_phi3_fp32_rmsprop_ckpt", "forward0", 2),
    ("ddp_llama_fp32_unused_view_s768", "forward0", 2),
];

/// (recording, case) whose `init` line was not the process's alone:
/// `fsdp_phi3_mp_bf16`, the first case of the session-6 set's first run,
/// read 3,961,978,880 bytes used after `torch.cuda.init()`.
const OUTSIDE_UNRECORDED: &[(&str, &str)] = &[("multi_s6_h200_n2.jsonl", "fsdp_phi3_mp_bf16")];

/// The device memory used after `init_process_group` on the 2-GPU host
/// (the CUDA context and NCCL's communicator): 984.875 MiB.
const N2_HOST_INIT: i64 = 1_032_716_288;

/// The device memory outside the caching allocator at the end of every
/// phase of every rank (`total - free - reserved` from `cudaMemGetInfo`,
/// each rank alone on its GPU): the CUDA context, NCCL's buffers (at
/// `init_process_group` and its first collectives) and the cuBLAS handles.
/// The session-6 set's accumulation cases show NCCL's first-backward share
/// there after a first micro-batch that reduces nothing; autocast, LoRA
/// over bf16 weights and ViT's float32 DDP show its 16-bit part with
/// float32 gradients.
#[test]
fn nccl_and_the_context_outside_the_allocator_are_the_gpus() {
    assert_eq!(
        outside("multi_cases.json", "multi_h200_n2.jsonl", 2),
        18 * 2 * 13
    );
    // NCCL's shares over 4 ranks are those over 2
    assert_eq!(
        outside("multi_cases_n4.json", "multi_h200_n4.jsonl", 4),
        15 * 4 * 13
    );
    for (cases, fixture, world, phases) in [
        ("multi_cases_s6.json", "multi_s6_h200_n2.jsonl", 2, 424 - 26),
        ("multi_cases_s7.json", "multi_s7_h200_n2.jsonl", 2, 474),
        ("multi_cases_s6.json", "multi_s6_h200_n4.jsonl", 4, 848),
        ("multi_cases_s7.json", "multi_s7_h200_n4.jsonl", 4, 948),
        ("multi_cases_s16.json", "multi_s16_h200_n2.jsonl", 2, 468),
    ] {
        assert_eq!(outside(cases, fixture, world), phases, "{fixture}");
    }
}

/// [`nccl_and_the_context_outside_the_allocator_are_the_gpus`] for one
/// recording (but [`OUTSIDE_UNRECORDED`]): the rank-phases checked.
fn outside(cases: &str, fixture: &str, world: i64) -> usize {
    use vramscope_models::requests::Requests;
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/validation/multi/{cases}")).unwrap(),
    )
    .unwrap();
    let recorded: Vec<Value> = std::fs::read_to_string(format!("{ROOT}/fixtures/multi/{fixture}"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let opts = EstimateOptions {
        profile: DeviceProfile::h200_torch_2_11(),
        ..EstimateOptions::default()
    };
    let context = (opts.profile.total_memory - opts.profile.usable_memory) as i64;
    let mut phases = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        if OUTSIDE_UNRECORDED.contains(&(fixture, name)) {
            continue;
        }
        let config = HfConfig::parse(&case["config"].to_string()).unwrap();
        // DDP's ranks run the same program: one estimate serves them all
        let ddp = (case["parallel"] == "ddp").then(|| {
            let est = estimate(&config, &workload(case, world, 0), &opts).unwrap();
            Requests::of(&est).unwrap()
        });
        for rank in 0..world {
            let own;
            let reqs = match &ddp {
                Some(r) => r,
                None => {
                    let est = estimate(&config, &workload(case, world, rank), &opts).unwrap();
                    own = Requests::of(&est).unwrap();
                    &own
                }
            };
            let gpu: Vec<&Value> = recorded
                .iter()
                .filter(|l| l["case"] == name && l["rank"] == rank && l["phase"] != "init")
                .collect();
            // the host's CUDA context over the 2-GPU host's, where the
            // twin's was measured (the 4-GPU host's is 2 MiB larger after
            // `torch.cuda.init()`, NCCL's 458 MiB the same)
            let host = recorded
                .iter()
                .find(|l| l["case"] == name && l["rank"] == rank && l["phase"] == "init")
                .map(|l| l["nccl_init_bytes"].as_i64().unwrap() - N2_HOST_INIT)
                .unwrap();
            for (
                vramscope_models::PhaseSpan {
                    name: phase, end, ..
                },
                g,
            ) in reqs.phases.iter().zip(&gpu)
            {
                let outside = g["device_used_bytes"].as_i64().unwrap()
                    - g["reserved_bytes"].as_i64().unwrap()
                    - host;
                let driver = reqs.driver_bytes_before(*end);
                let twin = context + driver as i64;
                let want = OUTSIDE_KNOWN
                    .iter()
                    .find(|k| k.0 == name && k.1 == phase)
                    .map_or(0, |k| k.2);
                assert_eq!(
                    (outside - twin) as f64 / (1 << 20) as f64,
                    want as f64,
                    "{name} rank {rank} {phase}: the GPU {} MiB outside the allocator, the twin {}",
                    outside as f64 / (1 << 20) as f64,
                    twin as f64 / (1 << 20) as f64
                );
                phases += 1;
            }
        }
    }
    phases
}

/// The watchdog-late DDP runs of every recording (25 runs) against the twin
/// with the first iteration's buckets never freed
/// (`DdpConfig::first_buckets_held`, the upper bound `estimate --ddp`
/// reports beside its figures): the whole run's peak reserved equal, and the
/// peak allocated equal or at most 0.05% above (GPT-2's 1 MiB of placement),
/// below only by a case's placement (`ddp_phi3_bf16` on 4: 3.19 MiB).
#[test]
fn watchdog_late_runs_reach_the_held_bound() {
    let opts = EstimateOptions {
        profile: DeviceProfile::h200_torch_2_11(),
        ..EstimateOptions::default()
    };
    let mut checked = 0;
    type Set<'a> = (
        &'a str,
        &'a str,
        i64,
        &'a [(&'a str, i64)],
        &'a [(&'a str, f64)],
    );
    let sets: [Set; 7] = [
        (
            "multi_cases.json",
            "multi_h200_n2.jsonl",
            2,
            WATCHDOG_LATE,
            INEXACT,
        ),
        (
            "multi_cases_n4.json",
            "multi_h200_n4.jsonl",
            4,
            WATCHDOG_LATE_N4,
            INEXACT_N4,
        ),
        (
            "multi_cases_s6.json",
            "multi_s6_h200_n2.jsonl",
            2,
            WATCHDOG_LATE_S6,
            INEXACT_S6,
        ),
        (
            "multi_cases_s7.json",
            "multi_s7_h200_n2.jsonl",
            2,
            WATCHDOG_LATE_S7,
            INEXACT_S7,
        ),
        (
            "multi_cases_s6.json",
            "multi_s6_h200_n4.jsonl",
            4,
            WATCHDOG_LATE_S6_N4,
            INEXACT_S6_N4,
        ),
        (
            "multi_cases_s7.json",
            "multi_s7_h200_n4.jsonl",
            4,
            WATCHDOG_LATE_S7_N4,
            INEXACT_S7_N4,
        ),
        (
            "multi_cases_s16.json",
            "multi_s16_h200_n2.jsonl",
            2,
            WATCHDOG_LATE_S16,
            INEXACT_S16,
        ),
    ];
    for (cases, fixture, world, late, inexact) in sets {
        let cases: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(format!("{ROOT}/validation/multi/{cases}")).unwrap(),
        )
        .unwrap();
        let recorded: Vec<Value> =
            std::fs::read_to_string(format!("{ROOT}/fixtures/multi/{fixture}"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .filter(|l: &Value| l["phase"] != "init")
                .collect();
        for &(name, rank) in late {
            let case = cases.iter().find(|c| c["name"] == name).unwrap();
            let config = HfConfig::parse(&case["config"].to_string()).unwrap();
            let mut w = workload(case, world, rank);
            if let Some(Parallel::Ddp(c)) = &mut w.parallel {
                c.first_buckets_held = true;
            }
            let est = estimate(&config, &w, &opts).unwrap();
            let peak = |k: &str| {
                recorded
                    .iter()
                    .filter(|l| l["case"] == name && l["rank"] == rank)
                    .map(|l| l[k].as_i64().unwrap())
                    .max()
                    .unwrap()
            };
            assert_eq!(
                est.peak_reserved_bytes,
                peak("peak_reserved_bytes"),
                "{name} rank {rank} of {world}"
            );
            // below it only by a case's placement (its bound in `inexact`)
            let below = inexact
                .iter()
                .find(|k| k.0 == name)
                .map_or(0, |k| (k.1 * est.peak_allocated_bytes as f64) as i64);
            let d = est.peak_allocated_bytes - peak("peak_allocated_bytes");
            assert!(
                (-below..=est.peak_allocated_bytes / 2000).contains(&d),
                "{name} rank {rank} of {world}: held bound {d:+} B from the GPU's peak allocated"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 32);
}
