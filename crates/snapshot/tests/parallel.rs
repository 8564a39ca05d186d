//! The parallel decoder of the trace (`read_parallel`) against the
//! sequential reader: the same snapshot, ids included, on the real
//! nanoGPT snapshots and on synthetic ones; and the same error, or a
//! fallback, on damaged and truncated copies.

use vramscope_snapshot::write::{snapshot_to_bytes, WriteOptions};
use vramscope_snapshot::*;
use vramscope_testkit::synth::{generate, Options, Rng};

const REAL: [&str; 3] = [
    "fixtures/snapshot_real/nanogpt_2streams_oom_h200.pickle.xz",
    "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
    "fixtures/seeds/snapshot_encoder_adamw_h100.pickle",
];

fn read(rel: &str) -> Vec<u8> {
    vramscope_testkit::xz::fixture_bytes(rel)
}

/// The two snapshots are the same, every id included.
fn assert_same(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.segments, b.segments);
    assert_eq!(a.device_traces.len(), b.device_traces.len());
    for (s, t) in a.device_traces.iter().zip(&b.device_traces) {
        assert_eq!(s.len(), t.len());
        for (i, (x, y)) in s.iter().zip(t.iter()).enumerate() {
            assert_eq!(x, y, "entry {i}");
        }
    }
    assert_eq!(
        format!("{:?}", a.allocator_settings),
        format!("{:?}", b.allocator_settings)
    );
    assert_eq!(a.external_annotations, b.external_annotations);
    assert_eq!(a.host_segments, b.host_segments);
    assert_eq!(a.host_traces, b.host_traces);
    assert_eq!(a.other, b.other);
    let (s, t) = (&a.stacks, &b.stacks);
    assert_eq!(s.num_strs(), t.num_strs());
    for i in 0..s.num_strs() as u32 {
        assert_eq!(s.str(Sym(i)), t.str(Sym(i)), "str {i}");
    }
    assert_eq!(s.num_frames(), t.num_frames());
    for i in 0..s.num_frames() as u32 {
        assert_eq!(s.frame(FrameId(i)), t.frame(FrameId(i)), "frame {i}");
    }
    assert_eq!(s.num_stacks(), t.num_stacks());
    for i in 0..s.num_stacks() as u32 {
        assert_eq!(
            s.stack_frame_ids(StackId(i)),
            t.stack_frame_ids(StackId(i)),
            "stack {i}"
        );
    }
}

/// Parallel on `threads` threads, when it does not give up, equals
/// sequential; returns whether it did not give up.
fn check(bytes: &[u8], threads: usize) -> bool {
    let seq = read_snapshot_sequential(bytes);
    match read_parallel(bytes, threads) {
        Some(Ok(par)) => {
            let seq = seq.unwrap_or_else(|e| panic!("parallel read what sequential refused: {e}"));
            assert_same(&par, &seq);
            true
        }
        Some(Err(e)) => {
            let seq = seq.expect_err("parallel refused what sequential read");
            assert_eq!(e.to_string(), seq.to_string());
            true
        }
        None => false,
    }
}

#[test]
fn real_snapshots_decode_in_parallel_as_sequentially() {
    for rel in REAL {
        let b = read(rel);
        for threads in [1, 3, 8] {
            assert!(check(&b, threads), "{rel} fell back on {threads} threads");
        }
        // the reader's own choice gives the same snapshot too
        let seq = read_snapshot_sequential(&b).unwrap();
        assert_same(&read_snapshot(&b).unwrap(), &seq);
        // and a file read in parallel by positioned reads
        let p = vramscope_testkit::xz::fixture_file(rel);
        let par = read_file_parallel(&p, 3)
            .unwrap_or_else(|| panic!("{rel}: file fell back"))
            .unwrap();
        assert_same(&par, &seq);
    }
}

fn synthetic(entries: usize, max: Option<usize>, streams: usize, conf: &str, seed: u64) -> Vec<u8> {
    let s = generate(&Options {
        entries,
        max_entries: max,
        streams,
        conf: conf.into(),
        seed,
        ..Options::default()
    })
    .unwrap();
    snapshot_to_bytes(&s.snapshot, &WriteOptions::default())
}

#[test]
fn synthetic_snapshots_decode_in_parallel_as_sequentially() {
    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    for (max, streams, conf) in [(None, 1, ""), (Some(n / 2), 3, "expandable_segments:True")] {
        let b = synthetic(n, max, streams, conf, 7);
        assert!(check(&b, 4), "synthetic {max:?} {streams} fell back");
    }
}

#[test]
fn damaged_real_snapshots_give_the_sequential_answer() {
    let b = read(REAL[1]);
    let mut rng = Rng(36);
    let iters = if cfg!(debug_assertions) { 30 } else { 300 };
    let (mut fell_back, mut decoded) = (0, 0);
    for k in 0..iters {
        let mut d = b.clone();
        if k % 3 == 0 {
            d.truncate(rng.index(b.len()));
        } else {
            for _ in 0..1 + rng.index(3) {
                let i = rng.index(d.len());
                d[i] = rng.below(256) as u8;
            }
        }
        if check(&d, 3) {
            decoded += 1;
        } else {
            fell_back += 1;
        }
        // and read_snapshot's answer is the sequential one
        let (r, s) = (read_snapshot(&d), read_snapshot_sequential(&d));
        match (r, s) {
            (Ok(x), Ok(y)) => assert_same(&x, &y),
            (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string()),
            (x, y) => panic!("{:?} / {:?}", x.err(), y.err()),
        }
    }
    assert!(
        decoded > 0 && fell_back > 0,
        "{decoded} decoded, {fell_back} fell back"
    );
}

/// A protocol-4 pickle written by hand, every object memoized as
/// Python's pickler does (`MEMOIZE`), its memo indices counted.
#[derive(Default)]
struct P {
    b: Vec<u8>,
    memo: u32,
}

impl P {
    fn op(&mut self, b: &[u8]) -> &mut Self {
        self.b.extend_from_slice(b);
        self
    }
    /// MEMOIZE: the index it stores at.
    fn m(&mut self) -> u32 {
        self.b.push(0x94);
        self.memo += 1;
        self.memo - 1
    }
    fn s(&mut self, t: &str) -> u32 {
        self.b.push(0x8c);
        self.b.push(t.len() as u8);
        self.b.extend_from_slice(t.as_bytes());
        self.m()
    }
    fn get(&mut self, i: u32) -> &mut Self {
        self.op(b"j").op(&i.to_le_bytes())
    }
    /// A trace entry whose frames list is the one frame dict `frame`.
    fn entry(&mut self, addr: u8, frame: u32) {
        self.op(b"}");
        self.m();
        self.op(b"(");
        self.s("action");
        self.s("alloc");
        for (k, v) in [("addr", addr), ("size", 32), ("stream", 0)] {
            self.s(k);
            self.op(&[b'K', v]);
        }
        self.s("frames");
        self.op(b"]");
        self.m();
        self.get(frame).op(b"a");
        self.op(b"u");
    }
}

/// A snapshot whose trace names a frame dict made before it (in the root
/// dict under `'x'`); `mutate` fills that dict again through a memo get
/// (`line` set to 7) before the trace, `after` after it.
fn hand_snapshot(mutate: bool) -> Vec<u8> {
    hand_snapshot_with(mutate, false)
}

fn hand_snapshot_with(mutate: bool, after: bool) -> Vec<u8> {
    let mut p = P::default();
    p.op(b"\x80\x04}");
    p.m();
    p.op(b"(");
    p.s("segments");
    p.op(b"]");
    p.m();
    p.s("x");
    p.op(b"}");
    let frame = p.m();
    p.op(b"(");
    p.s("name");
    p.s("f");
    p.s("filename");
    p.s("a.py");
    let line = p.s("line");
    p.op(b"K\x01u");
    if mutate {
        p.get(frame).op(b"(").get(line).op(b"K\x07u0");
    }
    p.s("device_traces");
    p.op(b"]");
    p.m();
    p.op(b"]");
    p.m();
    p.op(b"(");
    for a in 0..5 {
        p.entry(a * 16, frame);
    }
    p.op(b"ea");
    if after {
        p.s("y");
        p.get(frame).op(b"(").get(line).op(b"K\x07u");
    }
    p.op(b"u.");
    p.b
}

#[test]
fn a_frame_dict_filled_again_before_the_trace_sends_it_to_the_sequential_reader() {
    let plain = hand_snapshot(false);
    let par = read_parallel(&plain, 2)
        .expect("the plain one is decoded in parallel")
        .unwrap();
    assert_same(&par, &read_snapshot_sequential(&plain).unwrap());
    let mutated = hand_snapshot(true);
    assert!(read_parallel(&mutated, 2).is_none());
    let s = read_snapshot(&mutated).unwrap();
    let t = &s.device_traces[0];
    assert_eq!(t.len(), 5);
    assert_eq!(s.frames(t.get(0).unwrap().frames).next().unwrap().line, 7);
}

#[test]
fn a_frame_dict_filled_again_after_the_trace_sends_it_to_the_sequential_reader() {
    let mutated = hand_snapshot_with(false, true);
    assert!(read_parallel(&mutated, 2).is_none());
    let s = read_snapshot(&mutated).unwrap();
    let t = &s.device_traces[0];
    assert_eq!(s.frames(t.get(4).unwrap().frames).next().unwrap().line, 7);
}

#[test]
fn a_pickle_with_memo_puts_of_its_own_index_is_read_sequentially() {
    // BINPUT instead of the first MEMOIZE: no memo table
    let mut b = hand_snapshot(false);
    let i = b.iter().position(|&x| x == 0x94).unwrap();
    b.splice(i..=i, [b'q', 0]);
    assert!(read_parallel(&b, 2).is_none());
    assert_eq!(read_snapshot(&b).unwrap().device_traces[0].len(), 5);
}

/// A memo get in a frames list changed by one byte to name a list (what
/// session 16 did 2.7 GB into a 2.87 GB file): the parallel decoder
/// reports the entry as the sequential reader does, byte included, from
/// memory and from a file, on any number of threads; whether the list is
/// one of frames or not (the snapshot's first list).
#[test]
fn a_frames_list_item_that_is_a_list_is_reported_by_the_parallel_decoder() {
    let good = read(REAL[1]);
    let table = memo_table_bytes(&good, None)
        .unwrap()
        .expect("a memo table");
    let starts = |i: usize| table[i][0] as usize;
    let frames_list = (0..256)
        .find(|&i| {
            let s = starts(i);
            good[s..s + 4] == [b']', 0x94, b'(', b'h'] && good[starts(good[s + 4] as usize)] == b'}'
        })
        .expect("a frames list among the first 256 memo indices");
    let first_list = (0..256).find(|&i| good[starts(i)] == b']').unwrap();
    assert_ne!(frames_list, first_list);
    // a BINGET of a frame dict inside a frames list (`MARK`, gets,
    // `APPENDS`) past 60% of the file
    let at = (good.len() * 3 / 5..good.len() - 4)
        .find(|&i| {
            good[i] == b'h'
                && good[starts(good[i + 1] as usize)] == b'}'
                && good[i - 1] == b'('
                && matches!(good[i + 2], b'h' | b'e')
        })
        .expect("a frames list with gets");
    // the first object of each kind among the first 256 memo indices in
    // the frame dict's place: the parallel answer, where there is one, is
    // the sequential one
    let mut kinds: Vec<(u8, usize)> = Vec::new();
    for i in 0..256 {
        let k = good[starts(i)];
        if !kinds.iter().any(|&(x, _)| x == k) {
            kinds.push((k, i));
        }
    }
    assert!(kinds.len() >= 3, "{kinds:?}");
    let mut answered = 0;
    for &(_, i) in &kinds {
        let mut b = good.clone();
        b[at + 1] = i as u8;
        answered += usize::from(check(&b, 3));
    }
    // (a str, a list, a tuple: the sequential reader refuses each; a dict
    // may be read as a frame, and the sequential reader decides)
    assert!(answered >= 3, "{kinds:?}: {answered}");
    for list in [frames_list, first_list] {
        let mut b = good.clone();
        b[at + 1] = list as u8;
        let seq = read_snapshot_sequential(&b).unwrap_err();
        let msg = seq.to_string();
        assert!(
            msg.starts_with("bad snapshot field device_traces[0][")
                && msg.contains("].frames: frames[0]: expected a frame dict, found list"),
            "{msg}"
        );
        let o = seq.offset().expect("the byte is named") as usize;
        assert_eq!(b[o], b'u', "{msg}: the entry's SETITEMS");
        assert!(o > at && o - at < 256, "{msg}: changed byte {}", at + 1);
        for threads in [1, 3, 8] {
            match read_parallel(&b, threads) {
                Some(Err(e)) => {
                    assert_eq!(e.to_string(), msg);
                    assert_eq!(e.offset(), seq.offset());
                }
                Some(Ok(_)) => panic!("parallel read a bad entry"),
                None => panic!("parallel gave up on {threads} threads (list {list})"),
            }
        }
        let dir = std::env::temp_dir().join(format!("vramscope-par-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.pickle");
        std::fs::write(&path, &b).unwrap();
        let e = read_file_parallel(&path, 3)
            .expect("not given up")
            .unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(e.to_string(), msg);
    }
}

/// A byte that is no opcode, deep in a file read in parallel: the lex
/// that makes the memo table finds it, and that is the answer (the one
/// `read_snapshot_file` gives when it lexes a file), not a fallback that
/// lexes the file again.
#[test]
fn a_byte_that_is_no_opcode_is_the_parallel_file_readers_answer() {
    let mut b = read(REAL[1]);
    // the first `EMPTY_DICT` (a trace entry's or a frame's) past 60%
    let at = (b.len() * 3 / 5..b.len())
        .find(|&i| b[i] == b'}' && b[i + 1] == 0x94)
        .expect("a dict");
    b[at] = 0xff;
    let dir = std::env::temp_dir().join(format!("vramscope-par-op-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.pickle");
    std::fs::write(&path, &b).unwrap();
    let par = read_file_parallel(&path, 3);
    let lexed = read_snapshot_file_lexed(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    let e = par.expect("not given up").unwrap_err();
    assert_eq!(e.to_string(), lexed.to_string());
    assert_eq!(e.offset(), Some(at as u64));
    assert!(e.to_string().contains("unknown pickle opcode 0xff"), "{e}");
}

/// A `FRAME` header inside the trace declaring more bytes than follow it:
/// the VM refuses it wherever it stands, so the pieces give up too, with
/// a faulty entry before it or not (found by the fuzz target: the pieces
/// passed such a header and reported the entry, or read the snapshot).
#[test]
fn a_frame_header_past_the_end_inside_the_trace_is_the_sequential_readers_answer() {
    let good = read(REAL[1]);
    // the frames, followed from byte 2
    let mut starts = Vec::new();
    let mut pos = 2;
    while pos + 9 <= good.len() && good[pos] == 0x95 {
        starts.push(pos);
        pos += 9 + u64::from_le_bytes(good[pos + 1..pos + 9].try_into().unwrap()) as usize;
    }
    // a dict (`EMPTY_DICT MEMOIZE MARK`) past 60%, and its frame
    let at = (good.len() * 3 / 5..good.len() - 3)
        .find(|&i| good[i..i + 3] == [b'}', 0x94, b'('])
        .expect("a dict");
    let frame = *starts.iter().rev().find(|&&s| s < at).unwrap();
    let mut bogus = good[..at].to_vec();
    bogus.push(0x95);
    bogus.extend_from_slice(&u64::MAX.to_le_bytes());
    bogus.extend_from_slice(&good[at..]);
    let n = u64::from_le_bytes(bogus[frame + 1..frame + 9].try_into().unwrap()) + 9;
    bogus[frame + 1..frame + 9].copy_from_slice(&n.to_le_bytes());
    // and the same with a frames list's item made a str before it
    let get = (good.len() / 2..at)
        .find(|&i| good[i - 1] == b'(' && good[i] == b'h' && good[i + 2] == b'h')
        .expect("a memo get opening a list");
    let table = memo_table_bytes(&good, None).unwrap().unwrap();
    let s = (0..=255u8)
        .find(|&i| matches!(good[table[usize::from(i)][0] as usize], 0x8c | b'X'))
        .expect("a str among the first memo indices");
    let mut faulty = bogus.clone();
    faulty[get + 1] = s;
    for b in [bogus, faulty] {
        let seq = read_snapshot_sequential(&b).unwrap_err().to_string();
        assert!(seq.contains("while reading FRAME"), "{seq}");
        for threads in [1, 3] {
            match read_parallel(&b, threads) {
                None => {}
                Some(Ok(_)) => panic!("parallel read what sequential refused: {seq}"),
                Some(Err(e)) => assert_eq!(e.to_string(), seq),
            }
        }
    }
}

/// An entry as [`EarlyTrace::for_each`] hands it over: without its stack
/// and strings.
fn bare(e: TraceEntry) -> TraceEntry {
    TraceEntry {
        other_action: None,
        frames: StackId::EMPTY,
        compile_context: None,
        user_metadata: None,
        ..e
    }
}

#[test]
fn a_pass_reads_the_trace_and_the_settings_while_the_rest_is_read() {
    for rel in REAL {
        let seq = read_snapshot_sequential(&read(rel)).unwrap();
        let p = vramscope_testkit::xz::fixture_file(rel);
        for threads in [1, 3] {
            let (snap, got) = read_file_parallel_early(&p, threads, |t: EarlyTrace| {
                let settings = t.allocator_settings().cloned();
                let n = t.len();
                let mut v = Vec::new();
                t.for_each(|e| v.push(e));
                assert_eq!(v.len(), n);
                (settings, v)
            })
            .unwrap_or_else(|| panic!("{rel}: fell back"))
            .unwrap();
            assert_same(&snap, &seq);
            let (device, (settings, entries)) = got.expect("the pieces are device 0's trace");
            assert_eq!(device, 0, "{rel}");
            // (every real snapshot here has its settings)
            assert!(settings.is_some(), "{rel}");
            assert_eq!(
                format!("{settings:?}"),
                format!("{:?}", snap.allocator_settings),
                "{rel}"
            );
            let want: Vec<TraceEntry> = snap.device_traces[0].iter().map(bare).collect();
            assert!(entries == want, "{rel}: the pass read other entries");
        }
    }
}

#[test]
fn settings_that_name_an_earlier_str_are_read_ahead_with_it() {
    // the wrapped snapshot's settings, their conf string a memo get of a
    // string stored before the trace (as PyTorch's empty conf string is)
    let rel = REAL[1];
    let mut s = read_snapshot_sequential(&read(rel)).unwrap();
    let name = s.stacks.str(Sym(0)).to_owned();
    if let Some(a) = s.allocator_settings.as_mut() {
        a.pytorch_cuda_alloc_conf = Some(name.clone());
    }
    let b = snapshot_to_bytes(&s, &WriteOptions::default());
    let key = b"\x8c\x12allocator_settings\x94}\x94(\x8c\x17PYTORCH_CUDA_ALLOC_CONF\x94";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert!(
        matches!(b[at], b'h' | b'j'),
        "the conf string is a memo get"
    );
    let dir = std::env::temp_dir().join(format!("vs_early_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("named.pickle");
    std::fs::write(&p, &b).unwrap();
    let got = read_file_parallel_early(&p, 3, |t: EarlyTrace| t.allocator_settings().cloned());
    std::fs::remove_dir_all(&dir).ok();
    let (snap, got) = got.unwrap().unwrap();
    let (_, ahead) = got.unwrap();
    assert_eq!(ahead.unwrap().pytorch_cuda_alloc_conf, Some(name.clone()));
    assert_eq!(
        format!("{:?}", snap.allocator_settings),
        format!("{:?}", Some(&s.allocator_settings.unwrap()))
    );
}

/// A synthetic one-device snapshot moved to device `dev` of `devices`, the
/// others' traces empty: what `_snapshot()` gives on a multi-GPU host
/// after a run on one GPU (`device_traces` lists every device).
fn on_device(entries: usize, dev: usize, devices: usize) -> Vec<u8> {
    let mut s = generate(&Options {
        entries,
        seed: 11,
        ..Options::default()
    })
    .unwrap()
    .snapshot;
    for seg in &mut s.segments {
        seg.device = dev as i64;
    }
    let trace = s.device_traces.pop().unwrap();
    s.device_traces = (0..devices).map(|_| Trace::new()).collect();
    s.device_traces[dev] = trace;
    snapshot_to_bytes(&s, &WriteOptions::default())
}

#[test]
fn issue_36_one_busy_device_among_eight_is_read_in_parallel() {
    let n = if cfg!(debug_assertions) {
        6_000
    } else {
        60_000
    };
    let dir = std::env::temp_dir().join(format!("vs_devices_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for dev in [0, 3, 7] {
        let b = on_device(n, dev, 8);
        assert!(check(&b, 3), "device {dev} of 8 fell back");
        // the file reader, and the early pass over the busy device's trace
        let p = dir.join(format!("dev{dev}.pickle"));
        std::fs::write(&p, &b).unwrap();
        let seq = read_snapshot_sequential(&b).unwrap();
        let (snap, got) = read_file_parallel_early(&p, 3, |t: EarlyTrace| {
            let mut v = Vec::new();
            t.for_each(|e| v.push(e));
            v
        })
        .unwrap_or_else(|| panic!("device {dev}: file fell back"))
        .unwrap();
        assert_same(&snap, &seq);
        let (device, entries) = got.expect("the pieces are one device's trace");
        assert_eq!(device, dev);
        let want: Vec<TraceEntry> = snap.device_traces[dev].iter().map(bare).collect();
        assert!(entries == want, "device {dev}: the pass read other entries");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A synthetic snapshot of `devices` busy devices, with empty traces
/// inserted at `empty` (indices in the result, increasing).
fn busy_devices(entries: usize, devices: usize, empty: &[usize], streams: usize) -> Vec<u8> {
    let mut s = generate(&Options {
        entries,
        devices,
        streams,
        seed: 13,
        ..Options::default()
    })
    .unwrap()
    .snapshot;
    for &k in empty {
        s.device_traces.insert(k, Trace::new());
    }
    snapshot_to_bytes(&s, &WriteOptions::default())
}

#[test]
fn issue_36_several_busy_devices_are_read_in_parallel() {
    // each device's entries name the frame dicts and frames lists of the
    // devices before it: the pieces go on past the first list
    let n = if cfg!(debug_assertions) {
        6_000
    } else {
        60_000
    };
    let dir = std::env::temp_dir().join(format!("vs_busy_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (devices, empty, streams) in [
        (2, &[][..], 1),
        (3, &[0, 2, 5, 6][..], 3),
        (2, &[1, 3, 4, 5, 6, 7][..], 1),
    ] {
        let b = busy_devices(n, devices, empty, streams);
        for threads in [1, 3, 8] {
            assert!(
                check(&b, threads),
                "{devices} {empty:?}: fell back on {threads}"
            );
        }
        let seq = read_snapshot_sequential(&b).unwrap();
        let p = dir.join("busy.pickle");
        std::fs::write(&p, &b).unwrap();
        let (snap, got) = read_file_parallel_early(&p, 3, |t: EarlyTrace| {
            let mut v = Vec::new();
            t.for_each(|e| v.push(e));
            v
        })
        .unwrap_or_else(|| panic!("{devices} {empty:?}: file fell back"))
        .unwrap();
        assert_same(&snap, &seq);
        // the pass read the first busy device's trace, and only it
        let first = (0..).find(|k| !empty.contains(k)).unwrap();
        let (device, entries) = got.expect("the pass's device");
        assert_eq!(device, first, "{devices} {empty:?}");
        let want: Vec<TraceEntry> = snap.device_traces[first].iter().map(bare).collect();
        assert!(
            entries == want,
            "{devices} {empty:?}: the pass read other entries"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn issue_36_a_device_trace_of_one_entry_is_taken_with_the_others() {
    // a list of one is pickled without MARK (the entry, then APPEND)
    let mut s = generate(&Options {
        entries: 6_000,
        devices: 3,
        seed: 17,
        ..Options::default()
    })
    .unwrap()
    .snapshot;
    for k in [1, 2] {
        let t = &mut s.device_traces[k];
        t.drop_front(t.len() - 1);
    }
    s.device_traces.insert(2, Trace::new());
    let b = snapshot_to_bytes(&s, &WriteOptions::default());
    let one = b"e]\x94}\x94(";
    assert!(
        b.windows(one.len()).any(|w| w == one),
        "a list of one after a list's last batch"
    );
    for threads in [1, 3, 8] {
        assert!(check(&b, threads), "fell back on {threads} threads");
    }
    // and first (the pieces cannot start there): read in parallel or
    // not, the same snapshot
    s.device_traces.swap(0, 1);
    let b = snapshot_to_bytes(&s, &WriteOptions::default());
    check(&b, 3);
}

#[test]
fn issue_36_damaged_busy_devices_give_the_sequential_answer() {
    // bytes changed near the lists' boundaries, where the pieces go on
    // from one device's list to the next, and anywhere
    let b = busy_devices(4_000, 3, &[1, 4], 1);
    let ends: Vec<usize> = b
        .windows(4)
        .enumerate()
        .filter(|(_, w)| w[0] == b'e' && w[1] == b']' && w[2] == 0x94)
        .map(|(i, _)| i)
        .collect();
    assert!(ends.len() >= 3, "the lists' ends: {ends:?}");
    let mut rng = Rng(3636);
    let iters = if cfg!(debug_assertions) { 40 } else { 400 };
    let mut decoded = 0;
    for k in 0..iters {
        let mut d = b.clone();
        let at = if k % 2 == 0 {
            ends[rng.index(ends.len())] + rng.index(8)
        } else {
            rng.index(d.len())
        };
        d[at] = rng.below(256) as u8;
        if check(&d, 3) {
            decoded += 1;
        }
    }
    assert!(decoded > 0, "every damaged copy fell back");
}

#[test]
fn issue_36_a_bad_frames_item_in_a_later_device_is_the_sequential_answer() {
    let good = busy_devices(4_000, 2, &[], 1);
    let table = memo_table_bytes(&good, None)
        .unwrap()
        .expect("a memo table");
    let starts = |i: usize| table[i][0] as usize;
    // device 1's list starts after device 0's last APPENDS
    let key = b"e]\x94(}";
    let second = good
        .windows(key.len())
        .position(|w| w == key)
        .expect("the second device's list");
    let first_list = (0..256).find(|&i| good[starts(i)] == b']').unwrap();
    // a BINGET of a frame dict inside a frames list of device 1's
    let at = (second..good.len() - 4)
        .find(|&i| {
            good[i] == b'h'
                && good[starts(good[i + 1] as usize)] == b'}'
                && good[i - 1] == b'('
                && matches!(good[i + 2], b'h' | b'e')
        })
        .expect("a frames list with gets");
    let mut b = good.clone();
    b[at + 1] = first_list as u8;
    let msg = read_snapshot_sequential(&b).unwrap_err().to_string();
    assert!(
        msg.starts_with("bad snapshot field device_traces[1]["),
        "{msg}"
    );
    for threads in [1, 3, 8] {
        // (the pieces' fault is not the first device's: the conversion
        // gives up, and the sequential reader answers)
        match read_parallel(&b, threads) {
            None => {}
            Some(Err(e)) => assert_eq!(e.to_string(), msg),
            Some(Ok(_)) => panic!("parallel read a bad entry on {threads} threads"),
        }
    }
}
