//! `vramscope inspect`'s peaks equal the GPU's `memory_stats()` on every
//! snapshot recorded on an H100 (issue 3).

use vramscope_report::{analyze, Options, Report};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/alloc");
const TRUTH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
);

fn report(path: &std::path::Path) -> Report {
    let snap = vramscope_snapshot::read_snapshot_file(path).expect("readable");
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    analyze(&snap, &cfg, &Options::default())
}

#[test]
fn peaks_equal_memory_stats_on_every_fixture() {
    let mut n = 0;
    let mut bad = Vec::new();
    for e in std::fs::read_dir(FIXTURES).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|s| s.to_str()) != Some("pickle") {
            continue;
        }
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p.with_extension("stats.json")).unwrap())
                .unwrap();
        let r = report(&p);
        let case = p.file_stem().unwrap().to_string_lossy().to_string();
        let want_a = stats["allocated_bytes.all.peak"].as_u64().unwrap();
        let want_r = stats["reserved_bytes.all.peak"].as_u64().unwrap();
        let want_ac = stats["active_bytes.all.peak"].as_u64().unwrap();
        if (
            r.peak_allocated_bytes,
            r.peak_reserved_bytes,
            r.peak_active_bytes,
        ) != (want_a, want_r, want_ac)
        {
            bad.push(format!(
                "{case}: allocated {} want {want_a}, reserved {} want {want_r}, active {} want {want_ac}",
                r.peak_allocated_bytes, r.peak_reserved_bytes, r.peak_active_bytes
            ));
        }
        assert!(r.trace_complete, "{case}: {:?}", r.unknown);
        // streams.stats.json was taken one free too early: only the peaks apply.
        if case != "streams" {
            assert_eq!(
                r.final_allocated_bytes,
                stats["allocated_bytes.all.current"].as_u64().unwrap(),
                "{case}"
            );
            assert!(r.unknown.is_empty(), "{case}: {:?}", r.unknown);
        }
        // What is live at the peak adds up to the peak.
        assert_eq!(r.live_at_peak.bytes, r.peak_allocated_bytes, "{case}");
        n += 1;
    }
    assert!(n >= 14, "only {n} fixtures found");
    assert!(bad.is_empty(), "peaks differ:\n{}", bad.join("\n"));
}

#[test]
fn encoder_adamw_truth() {
    let r = report(std::path::Path::new(TRUTH));
    assert_eq!(r.peak_allocated_bytes, 676_800_000);
    assert_eq!(r.peak_reserved_bytes, 880_803_840);
    assert!(r.trace_complete);
    assert_eq!(r.live_at_peak.bytes, 676_800_000);
    let cats: Vec<&str> = r.categories.iter().map(|c| c.category.as_str()).collect();
    assert!(cats.contains(&"parameters"), "{cats:?}");
}

#[test]
fn oom_events_are_reported_with_the_state_before() {
    let r = report(&std::path::Path::new(FIXTURES).join("oom_retry.pickle"));
    assert_eq!(r.ooms.len(), 1);
    assert!(r.ooms[0].reserved_before_bytes > 0);
}

/// A trace whose start was dropped (ring buffer): the report says so and
/// reconstructs the baseline from the final segments instead of guessing.
#[test]
fn truncated_trace_is_flagged() {
    let mut snap = vramscope_snapshot::read_snapshot_file(
        std::path::Path::new(FIXTURES).join("training.pickle"),
    )
    .unwrap();
    let full = {
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        analyze(&snap, &cfg, &Options::default())
    };
    let t = &mut snap.device_traces[0];
    let cut = t.len() / 2;
    t.drop_front(cut);
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let r = analyze(&snap, &cfg, &Options::default());
    assert!(!r.trace_complete);
    assert!(
        r.unknown[0].contains("does not start at the first allocation"),
        "{:?}",
        r.unknown
    );
    assert_eq!(r.final_allocated_bytes, full.final_allocated_bytes);
    assert!(r.peak_allocated_bytes <= full.peak_allocated_bytes);
}

/// The real nanoGPT snapshots recorded on an H200 (`fixtures/snapshot_real`,
/// issue 36): the trace's facts as Python's `pickle` reads them, and the
/// report ends with the reserved bytes of the final segments.
#[test]
fn real_nanogpt_snapshots_h200() {
    // (file, entries, streams, expandable, segments' total size, OOM entry)
    let cases = [
        (
            "nanogpt_2streams_oom_h200.pickle",
            13_340,
            2,
            false,
            5_731_516_416,
            5740,
        ),
        (
            "nanogpt_wrapped_3streams_expandable_oom_h200.pickle",
            17_654,
            3,
            true,
            5_783_945_216,
            2556,
        ),
    ];
    for (file, entries, streams, expandable, reserved, oom_at) in cases {
        let snap = vramscope_snapshot::read_snapshot_file(vramscope_testkit::xz::fixture_file(
            &format!("fixtures/snapshot_real/{file}.xz"),
        ))
        .expect("readable");
        let t = &snap.device_traces[0];
        assert_eq!(t.len(), entries, "{file}");
        let s: std::collections::HashSet<u64> = t.iter().map(|e| e.stream).collect();
        assert_eq!(s.len(), streams, "{file}");
        assert!(
            snap.segments.iter().all(|g| g.is_expandable == expandable),
            "{file}"
        );
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        let r = analyze(&snap, &cfg, &Options::default());
        assert_eq!(r.final_reserved_bytes, reserved, "{file}");
        assert!(!r.trace_complete, "{file}: the trace starts mid-run");
        assert_eq!(r.ooms.len(), 1, "{file}");
        assert_eq!(r.ooms[0].trace_index, oom_at, "{file}");
        assert_eq!(r.ooms[0].requested_bytes, 402_653_184, "{file}");
        // what is live at the peak is what is allocated there, although
        // the trace starts mid-run (an allocation whose block the timeline
        // lost is still ended by its free)
        assert_eq!(r.live_at_peak.bytes, r.peak_allocated_bytes, "{file}");
    }
}
