//! Golden fixtures from a real H100 (PyTorch 2.11): every snapshot recorded
//! by validation/alloc_cases.sh replays exactly, and the twin's
//! `memory_stats()` and `memory_summary()` at the end equal the GPU's.

use std::path::PathBuf;

use vramscope_alloc::memory_summary;
use vramscope_replay::{from_snapshot, replay, ReplayOptions};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/alloc")
}

fn case(name: &str) {
    let dir = fixtures();
    let bytes = std::fs::read(dir.join(format!("{name}.pickle"))).unwrap();
    let snap = vramscope_snapshot::read_snapshot(&bytes).unwrap();
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.meta.json"))).unwrap(),
    )
    .unwrap();
    let stats: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.stats.json"))).unwrap(),
    )
    .unwrap();
    let summary = std::fs::read_to_string(dir.join(format!("{name}.summary.txt"))).unwrap();

    let (config, warning) = from_snapshot::config(&snap);
    assert_eq!(warning, None);
    assert_eq!(config.settings, meta["conf"].as_str().unwrap());
    let opts = ReplayOptions {
        config,
        memory_fraction: meta["fraction"].as_f64(),
        total_memory: meta["mem_get_info"][1].as_u64().unwrap(),
        device_capacity: None,
    };
    let rec = from_snapshot::recording(&snap, 0);
    let r = replay(&rec, &opts).unwrap();
    assert!(r.is_exact(), "{name}: {}", r.first_divergence.unwrap());
    assert_eq!(r.segment_events_matched, r.segment_events_total);

    // Every memory_stats() key the GPU reported.
    let mine = r.stats.memory_stats();
    let theirs = stats.as_object().unwrap();
    let mut diffs = Vec::new();
    for (k, v) in theirs {
        match mine.get(k) {
            Some(m) if *m == v.as_i64().unwrap() => {}
            other => diffs.push(format!("{k}: GPU {v}, twin {other:?}")),
        }
    }
    for k in mine.keys() {
        if !theirs.contains_key(k) {
            diffs.push(format!("{k}: not reported by PyTorch"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{name}: memory_stats differ:\n{}",
        diffs.join("\n")
    );

    // memory_summary() byte for byte.
    assert_eq!(
        memory_summary(&r.stats, 0, false),
        summary,
        "{name}: memory_summary differs"
    );
}

macro_rules! cases {
    ($($name:ident),*) => { $( #[test] fn $name() { case(stringify!($name)); } )* };
}

cases!(
    default,
    expandable,
    max_split,
    roundup,
    roundup_intervals,
    non_split_rounding,
    empty_cache,
    expandable_empty_cache,
    gc,
    oom_retry,
    oom_retry_max_split,
    streams,
    training,
    training_expandable
);

/// fixtures/seeds/ snapshot (3 AdamW steps of a TransformerEncoderLayer):
/// exact, and its peaks equal the probe's measured ones.
#[test]
fn truth_encoder_snapshot() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle");
    let snap = vramscope_snapshot::read_snapshot(&std::fs::read(p).unwrap()).unwrap();
    let opts = ReplayOptions {
        config: from_snapshot::config(&snap).0,
        memory_fraction: None,
        total_memory: 85_017_493_504,
        device_capacity: None,
    };
    let r = replay(&from_snapshot::recording(&snap, 0), &opts).unwrap();
    assert!(r.is_exact(), "{}", r.first_divergence.unwrap());
    // fixtures/seeds/seeds_h100.jsonl, case "snapshot", step iter2.
    assert_eq!(r.stats.allocated_bytes.all().peak, 676_800_000);
    assert_eq!(r.stats.reserved_bytes.all().peak, 880_803_840);
    assert_eq!(r.stats.allocated_bytes.all().current, 236_089_856);
    assert_eq!(r.stats.requested_bytes.all().current, 236_089_348);
}

/// The replay notices when the twin is set up wrong: a memory fraction the
/// run did not have makes it run out of memory where the GPU did not.
#[test]
fn wrong_settings_diverge() {
    let bytes = std::fs::read(fixtures().join("training.pickle")).unwrap();
    let snap = vramscope_snapshot::read_snapshot(&bytes).unwrap();
    let opts = ReplayOptions {
        config: from_snapshot::config(&snap).0,
        memory_fraction: Some(0.001),
        total_memory: 85_017_493_504,
        device_capacity: None,
    };
    let r = replay(&from_snapshot::recording(&snap, 0), &opts).unwrap();
    let d = r.first_divergence.expect("must diverge");
    assert!(d.got.contains("out of memory"), "{d}");
}
