//! The predicted run as a memory snapshot (`vramscope estimate --snapshot`):
//! the pickle reads back, and `vramscope inspect`'s analysis of it finds the
//! estimate's own figures: the peaks, the final state, the out-of-memory,
//! and the eager twin's categories.

use vramscope_alloc::AllocatorConfig;
use vramscope_models::predicted::predicted_snapshot;
use vramscope_models::{estimate, Estimate, EstimateOptions};
use vramscope_snapshot::write::{snapshot_to_bytes, WriteOptions};
use vramscope_snapshot::{read_snapshot, Snapshot};
use vramscope_testkit::fixture::{self, Case};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn case(name: &str) -> (Case, vramscope_models::HfConfig) {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/hf_cases.json")).unwrap();
    let case = fixture::cases(&text)
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap();
    let text = std::fs::read_to_string(format!("{ROOT}/fixtures/estimate/{name}.json")).unwrap();
    (case, fixture::recorded(&text).unwrap().config)
}

/// Estimate with the trace recorded; the snapshot, written and read back.
fn predicted(name: &str, fraction: Option<f64>) -> (Estimate, Snapshot, AllocatorConfig) {
    let (case, config) = case(name);
    let opts = EstimateOptions {
        allocator: case.allocator.clone(),
        memory_fraction: fraction,
        record_trace: true,
        ..EstimateOptions::default()
    };
    let est = estimate(&config, &case.workload, &opts).unwrap();
    let snap = predicted_snapshot(&est, &case.workload, &case.alloc_conf, &case.allocator).unwrap();
    let bytes = snapshot_to_bytes(&snap, &WriteOptions::default());
    let back = read_snapshot(&bytes).unwrap();
    (est, back, case.allocator)
}

#[test]
fn inspect_finds_the_estimates_figures() {
    for name in [
        "gpt2_train_fp32",
        "llama_train_bf16_adamw",
        "bert_infer_fp32",
    ] {
        let (est, snap, cfg) = predicted(name, None);
        let r = vramscope_report::analyze(&snap, &cfg, &vramscope_report::Options::default());
        assert!(
            r.trace_complete,
            "{name}: the trace starts with the process"
        );
        assert_eq!(
            r.peak_allocated_bytes as i64, est.peak_allocated_bytes,
            "{name}"
        );
        assert_eq!(
            r.peak_reserved_bytes as i64, est.peak_reserved_bytes,
            "{name}"
        );
        let last = est.phases.last().unwrap();
        assert_eq!(
            r.final_allocated_bytes as i64, last.allocated_bytes,
            "{name}"
        );
        assert_eq!(r.final_reserved_bytes as i64, last.reserved_bytes, "{name}");
        // the segments at the end hold exactly what the trace leaves live
        let live: u64 = snap.segments.iter().map(|s| s.allocated_size).sum();
        assert_eq!(live as i64, last.allocated_bytes, "{name}");
        assert!(r.ooms.is_empty(), "{name}");
        // every allocation is classified by the twin's category (the cuBLAS
        // workspace by its own rule, which comes first)
        for c in &r.categories {
            if c.category != "cublas_workspace" {
                assert!(
                    c.evidence
                        .iter()
                        .all(|e| e.starts_with("predicted by vramscope estimate")),
                    "{name}: {} {:?}",
                    c.category,
                    c.evidence
                );
            }
        }
        let cats: Vec<&str> = r.categories.iter().map(|c| c.category.as_str()).collect();
        assert!(cats.contains(&"parameters"), "{name}: {cats:?}");
        if est.phases.iter().any(|p| p.name.starts_with("step")) {
            assert!(cats.contains(&"optimizer_state"), "{name}: {cats:?}");
        }
    }
}

#[test]
fn an_out_of_memory_ends_the_trace_as_an_observer_would_dump_it() {
    let (est, snap, cfg) = predicted("llama_train_bf16_adamw", Some(0.005));
    let oom = est.oom.as_ref().expect("0.5% of an H100 is too little");
    let r = vramscope_report::analyze(&snap, &cfg, &vramscope_report::Options::default());
    assert_eq!(r.ooms.len(), 1);
    let trace = &snap.device_traces[0];
    assert_eq!(
        trace.action(trace.len() - 1),
        Some(vramscope_snapshot::TraceAction::Oom)
    );
    assert_eq!(r.peak_allocated_bytes as i64, est.peak_allocated_bytes);
    // what the segments hold is what was live when the allocation failed
    let live: u64 = snap.segments.iter().map(|s| s.allocated_size).sum();
    let at_oom = est.phases.last().unwrap();
    assert_eq!(at_oom.name, oom.phase);
    assert_eq!(live as i64, at_oom.allocated_bytes);
}

#[test]
fn no_snapshot_without_a_recorded_trace() {
    let (case, config) = case("gpt2_infer_fp32");
    let est = estimate(&config, &case.workload, &EstimateOptions::default()).unwrap();
    assert!(est.recorded.is_none());
    assert!(predicted_snapshot(&est, &case.workload, "", &case.allocator).is_none());
}
