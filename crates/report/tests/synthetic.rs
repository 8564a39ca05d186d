//! Synthetic snapshots (`vramscope_testkit::synth`, the generator behind
//! `validation/bench_inspect.sh`) are what PyTorch would have written: their
//! traces replay exactly through the allocator twin, and `inspect` finds the
//! twin's own `memory_stats()` peaks in them, under several allocator
//! settings (issue 3).

use vramscope_replay::{from_snapshot, replay, ReplayOptions};
use vramscope_report::{analyze, Options};
use vramscope_testkit::synth::{generate, Options as Synth};

#[test]
fn inspect_finds_the_twins_peaks_in_synthetic_snapshots() {
    for conf in [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "roundup_power2_divisions:4",
    ] {
        let s = generate(&Synth {
            entries: 40_000,
            devices: 2,
            seed: 11,
            conf: conf.into(),
            ..Default::default()
        })
        .unwrap();
        let snap = &s.snapshot;
        let (cfg, warning) = from_snapshot::config(snap);
        assert_eq!(warning, None, "{conf}");
        for (d, &(a, ac, r)) in s.peaks.iter().enumerate() {
            let rep = analyze(
                snap,
                &cfg,
                &Options {
                    device: d,
                    ..Options::default()
                },
            );
            let ctx = format!("{conf:?}, device {d}");
            assert_eq!(
                (
                    rep.peak_allocated_bytes,
                    rep.peak_active_bytes,
                    rep.peak_reserved_bytes
                ),
                (a, ac, r),
                "{ctx}"
            );
            assert!(rep.trace_complete, "{ctx}: {:?}", rep.unknown);
            assert!(rep.unknown.is_empty(), "{ctx}: {:?}", rep.unknown);
            assert_eq!(rep.live_at_peak.bytes, a, "{ctx}");
            // The stacks say what the memory is.
            let cats: Vec<&str> = rep.categories.iter().map(|c| c.category.as_str()).collect();
            for want in [
                "parameters",
                "optimizer_state",
                "activations",
                "cublas_workspace",
            ] {
                assert!(cats.contains(&want), "{ctx}: {want} missing from {cats:?}");
            }
        }
    }
}

#[test]
fn synthetic_snapshots_replay_exactly() {
    let s = generate(&Synth {
        entries: 40_000,
        seed: 5,
        ..Default::default()
    })
    .unwrap();
    let (config, _) = from_snapshot::config(&s.snapshot);
    let rec = from_snapshot::recording(&s.snapshot, 0);
    let report = replay(
        &rec,
        &ReplayOptions {
            config,
            memory_fraction: None,
            // H100 (fixtures/alloc/*.meta.json); only sizes expandable
            // segments' address space, unused here.
            total_memory: 85_017_493_504,
            device_capacity: None,
        },
    )
    .unwrap();
    assert!(report.is_exact(), "{:?}", report.first_divergence);
    assert_eq!(report.segment_events_matched, report.segment_events_total);
    assert!(report.segment_events_total > 10);
}

/// The static `--html` page stays bounded as the trace grows: ten times
/// the entries, the page no larger than a constant (the bands, their
/// offsets, the segments and the OOMs it lists are capped), and it says how
/// to see the full detail.
#[test]
fn the_static_page_is_bounded() {
    use vramscope_report::html::{MAX_BANDS, MAX_BAND_POINTS};
    let page = |entries: usize| {
        let s = generate(&Synth {
            entries,
            seed: 7,
            streams: 3,
            ..Default::default()
        })
        .unwrap();
        let (cfg, _) = from_snapshot::config(&s.snapshot);
        let mut r = vramscope_report::analyze(&s.snapshot, &cfg, &Default::default());
        r.snapshot = "big.pickle".into();
        vramscope_report::html::render_snapshot(&s.snapshot, &cfg, &r)
    };
    let (small, big) = (page(20_000), page(200_000));
    let data = |p: &str| -> serde_json::Value {
        let a = p.find("application/json\">").unwrap() + "application/json\">".len();
        serde_json::from_str(&p[a..a + p[a..].find("</script>").unwrap()].replace("<\\/", "</"))
            .unwrap()
    };
    for p in [&small, &big] {
        let d = data(p);
        let bands = d["bands"].as_array().unwrap();
        let points: usize = bands.iter().map(|b| b["p"].as_array().unwrap().len()).sum();
        assert!(bands.len() <= MAX_BANDS && points <= MAX_BAND_POINTS);
        assert!(d["total"].as_array().unwrap().len() <= 1000);
        assert!(p.contains("vramscope view "));
    }
    assert!(big.len() < 3_000_000, "{} bytes", big.len());
    eprintln!("pages: {} and {} bytes", small.len(), big.len());
}

/// A `</script>` in the page's data (here the snapshot's name) is written
/// `<\/script>`, so the data's script tag is not ended early, and the data
/// reads back as it was.
#[test]
fn a_closing_script_tag_in_the_data_does_not_end_it() {
    let s = generate(&Synth {
        entries: 200,
        seed: 3,
        ..Default::default()
    })
    .unwrap();
    let (cfg, _) = from_snapshot::config(&s.snapshot);
    let mut r = vramscope_report::analyze(&s.snapshot, &cfg, &Default::default());
    let name = "run</script><script>alert(1)</script>.pickle";
    r.snapshot = name.into();
    let page = vramscope_report::html::render_snapshot(&s.snapshot, &cfg, &r);
    assert!(!page.contains(name));
    let a = page.find("application/json\">").unwrap() + "application/json\">".len();
    let raw = &page[a..a + page[a..].find("</script>").unwrap()];
    let d: serde_json::Value = serde_json::from_str(raw).unwrap();
    assert_eq!(d["report"]["snapshot"], name);
}
