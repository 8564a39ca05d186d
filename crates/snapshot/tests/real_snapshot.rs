//! The real PyTorch 2.11 / H100 snapshot in `fixtures/seeds`: exact facts
//! verified with Python's `pickle`.

use vramscope_snapshot::pickle::{self, View};
use vramscope_snapshot::*;

const REAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
);

fn real_bytes() -> Vec<u8> {
    std::fs::read(REAL).unwrap_or_else(|e| panic!("cannot read {REAL}: {e}"))
}

#[test]
fn segments_and_traces() {
    let s = read_snapshot_file(REAL).unwrap();
    assert_eq!(s.segments.len(), 22);
    assert_eq!(s.segments[0].total_size, 134_217_728);
    assert_eq!(s.segments[0].address, 140_449_658_437_632);
    assert_eq!(s.segments[0].segment_type, SegmentType::Large);
    assert_eq!(s.segments[0].segment_pool_id, (0, 0));
    assert!(!s.segments[0].is_expandable);
    assert_eq!(s.segments.iter().map(|g| g.blocks.len()).sum::<usize>(), 59);
    let b0 = &s.segments[0].blocks[0];
    assert_eq!(b0.address, Some(140_449_658_437_632));
    assert_eq!(b0.size, 134_217_728);
    assert_eq!(b0.requested_size, 16_777_216);
    assert_eq!(b0.state, BlockState::Inactive);

    assert_eq!(s.device_traces.len(), 1);
    let t = &s.device_traces[0];
    assert_eq!(t.len(), 897);
    let count = |a: Option<TraceAction>| t.iter().filter(|e| e.action == a).count();
    assert_eq!(count(Some(TraceAction::Alloc)), 319);
    assert_eq!(count(Some(TraceAction::FreeRequested)), 278);
    assert_eq!(count(Some(TraceAction::FreeCompleted)), 278);
    assert_eq!(count(Some(TraceAction::SegmentAlloc)), 22);

    let e = t.get(0).unwrap();
    assert_eq!(e.action, Some(TraceAction::SegmentAlloc));
    assert_eq!(e.size, 20_971_520);
    assert_eq!(e.addr, 140_451_713_646_592);
    assert_eq!(e.stream, 0);
    assert_eq!(e.time_us, Some(1_795_288_571_178_559));
    assert_eq!(e.compile_context.map(|c| s.str(c)), Some("N/A"));
    assert_eq!(e.user_metadata.map(|c| s.str(c)), Some(""));
    let frames: Vec<Frame> = s.frames(e.frames).collect();
    assert_eq!(frames.len(), 48);
    assert_eq!(frames[0].name, "torch::unwind::unwind()");
    assert_eq!(frames[0].filename, "??");
    let last = frames.last().unwrap();
    assert_eq!(
        (last.name, last.filename, last.line),
        ("<module>", "/home/user/probe_dir/seeds_probe.py", 107)
    );
    // stacks are interned: 81 distinct stacks by value in the trace (+ the empty one)
    let distinct: std::collections::HashSet<StackId> = t.iter().map(|e| e.frames).collect();
    assert_eq!(distinct.len(), 81);
}

#[test]
fn allocator_settings() {
    let s = read_snapshot(&real_bytes()).unwrap();
    let a = s.allocator_settings.as_ref().unwrap();
    assert_eq!(a.pytorch_cuda_alloc_conf.as_deref(), Some(""));
    assert_eq!(a.max_split_size, Some(-1));
    assert_eq!(a.garbage_collection_threshold, Some(0.0));
    assert_eq!(a.expandable_segments, Some(false));
    assert_eq!(a.release_lock_on_cudamalloc, Some(false));
    assert_eq!(a.pinned_num_register_threads, Some(1));
    assert_eq!(a.pinned_use_cuda_host_register, Some(false));
    match a.roundup_power2_divisions.as_ref().unwrap() {
        RoundupPower2Divisions::PerBucket(b) => {
            assert_eq!(b.len(), 16);
            assert_eq!(b[0], (1, 0));
            assert_eq!(b[15], (32768, 0));
            assert!(b.iter().all(|&(_, d)| d == 0));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(a.other.len(), 1);
    assert_eq!(a.other[0].0, "graph_capture_record_stream_reuse");
}

/// The twin's settings of a process started without `PYTORCH_CUDA_ALLOC_CONF`
/// are the GPU's, key for key.
#[test]
fn the_twins_default_settings_are_the_real_ones() {
    let s = read_snapshot(&real_bytes()).unwrap();
    let twin = AllocatorSettings::from_config("", &vramscope_alloc::AllocatorConfig::default());
    assert_eq!(Some(twin), s.allocator_settings);
}

#[test]
fn external_annotations() {
    let s = read_snapshot(&real_bytes()).unwrap();
    assert!(!s.external_annotations.is_empty());
    let a = &s.external_annotations[0];
    assert_eq!(a.stage, "START");
    assert_eq!(a.name, "Optimizer.step#AdamW.step");
    assert_eq!(a.device, 0);
    assert_eq!(a.time_us, 1_795_288_577_374_378);
    assert!(a.other.is_empty());
    assert_eq!(s.external_annotations[1].stage, "END");
    assert!(s.host_segments.is_none() && s.host_traces.is_none() && s.other.is_empty());
}

#[test]
fn generic_pickle_view() {
    let p = pickle::parse(&real_bytes()).unwrap();
    assert_eq!(p.protocol(), 4);
    let root = p.root();
    let keys: Vec<&str> = root
        .as_dict()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "segments",
            "device_traces",
            "allocator_settings",
            "external_annotations"
        ]
    );
    let seg0 = root
        .get("segments")
        .unwrap()
        .as_seq()
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(seg0.get("total_size").unwrap().as_u64(), Some(134_217_728));
    assert!(matches!(seg0.get("segment_pool_id").unwrap().view(), View::Tuple(t) if t.len() == 2));
    // shared references survive: frame dicts are memoized in the file
    let trace = root
        .get("device_traces")
        .unwrap()
        .as_seq()
        .unwrap()
        .get(0)
        .unwrap()
        .as_seq()
        .unwrap();
    let f1 = trace
        .get(0)
        .unwrap()
        .get("frames")
        .unwrap()
        .as_seq()
        .unwrap()
        .get(0)
        .unwrap();
    let f2 = trace
        .get(1)
        .unwrap()
        .get("frames")
        .unwrap()
        .as_seq()
        .unwrap()
        .get(0)
        .unwrap();
    assert!(f1.same_object(f2));
    let owned = seg0.to_value().unwrap();
    assert_eq!(
        owned.get("segment_type").and_then(|v| v.as_str()),
        Some("large")
    );
}

/// torch 2.11 on an H200 (`validation/run/probes/iy03_phase0_probe_s58.py`):
/// two entries' frames hold `init_gpu_context` with the line PyTorch did not
/// know, written as 2**64-1 (a `uint64_t` -1); the model keeps it as -1 and
/// the writer gives 2**64-1 back.
#[test]
fn an_unknown_line_of_torch_2_11() {
    const F: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/snapshot_real/iy03_phase0_unknown_line_h200.pickle"
    );
    let bytes = std::fs::read(F).unwrap();
    let s = read_snapshot_sequential(&bytes).unwrap();
    assert_eq!(s.segments.len(), 11);
    let t = &s.device_traces[0];
    assert_eq!(t.len(), 335);
    let mut unknown = Vec::new();
    for (i, e) in t.iter().enumerate() {
        for (j, f) in s.frames(e.frames).enumerate() {
            if f.line < 0 {
                unknown.push((i, j, f.name, f.line));
            }
        }
    }
    assert_eq!(
        unknown,
        [
            (333, 9, "init_gpu_context", -1),
            (334, 9, "init_gpu_context", -1)
        ]
    );
    for s2 in [
        read_snapshot(&bytes).unwrap(),
        read_snapshot_generic(&bytes).unwrap(),
        read_snapshot_file(F).unwrap(),
        read_parallel(&bytes, 2)
            .expect("the parallel decoder gave up")
            .unwrap(),
    ] {
        let t2 = &s2.device_traces[0];
        assert_eq!(t2.len(), 335);
        for i in [333, 334] {
            let a: Vec<Frame> = s.frames(t.get(i).unwrap().frames).collect();
            let b: Vec<Frame> = s2.frames(t2.get(i).unwrap().frames).collect();
            assert_eq!(a, b, "entry {i}");
        }
    }
    let out = vramscope_snapshot::write::snapshot_to_bytes(&s, &Default::default());
    let max = [0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0];
    assert!(out.windows(max.len()).any(|w| w == max));
    let back = read_snapshot(&out).unwrap();
    let f: Vec<Frame> = back
        .frames(back.device_traces[0].get(333).unwrap().frames)
        .collect();
    assert_eq!((f[9].name, f[9].line), ("init_gpu_context", -1));
}
