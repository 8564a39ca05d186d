//! Hand-built and Python-generated pickles (tests/data, see make_fixtures.py).

use vramscope_snapshot::pickle::{self, BigInt, Value};
use vramscope_snapshot::write::{snapshot_to_bytes, PickleWriter, WriteOptions};
use vramscope_snapshot::*;

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn frames(s: &Snapshot, id: StackId) -> Vec<(String, String, i64)> {
    s.frames(id)
        .map(|f| (f.name.to_owned(), f.filename.to_owned(), f.line))
        .collect()
}

fn check_fixture_snapshot(s: &Snapshot) {
    assert_eq!(s.segments.len(), 1);
    let g = &s.segments[0];
    assert_eq!(g.address, 139_000_000_000_000);
    assert_eq!(g.stream, u64::MAX, "a stream wider than i64 is kept as u64");
    assert_eq!(g.segment_type, SegmentType::Small);
    assert_eq!(
        (g.allocated_size, g.active_size, g.requested_size),
        (512, 1024, 500)
    );
    let fr = frames(s, g.frames);
    assert_eq!(fr.len(), 2);
    assert_eq!(
        fr[0],
        ("at::native::empty_cuda(...)".into(), "??".into(), 0)
    );
    assert_eq!(
        fr[1],
        (
            "forward".into(),
            "/site-packages/torch/nn/modules/linear.py".into(),
            125
        )
    );
    let states: Vec<BlockState> = g.blocks.iter().map(|b| b.state).collect();
    assert_eq!(
        states,
        [
            BlockState::ActiveAllocated,
            BlockState::ActivePendingFree,
            BlockState::Inactive
        ]
    );
    assert_eq!(
        g.blocks[0].frames, g.frames,
        "equal stacks are interned once"
    );
    assert_eq!(g.blocks[1].frames, StackId::EMPTY);
    assert_eq!(g.blocks[1].address, Some(139_000_000_000_512));

    let t = &s.device_traces[0];
    assert_eq!(t.len(), 3);
    assert_eq!(t.get(0).unwrap().action, Some(TraceAction::SegmentAlloc));
    assert_eq!(t.get(0).unwrap().compile_context, None);
    assert_eq!(t.get(1).unwrap().action, Some(TraceAction::Alloc));
    assert_eq!(
        t.get(1).unwrap().compile_context.map(|c| s.str(c)),
        Some("N/A")
    );
    assert_eq!(t.get(1).unwrap().user_metadata.map(|c| s.str(c)), Some(""));
    assert_eq!(t.get(2).unwrap().action, Some(TraceAction::Oom));
    assert_eq!(t.get(2).unwrap().device_free, Some(123_456));
    assert_eq!(t.get(2).unwrap().addr, 0);
    assert_eq!(t.get(2).unwrap().size, 1 << 40);
    assert_eq!(t.get(2).unwrap().time_us, Some(1_700_000_000_000_002));

    let a = s.allocator_settings.as_ref().unwrap();
    assert_eq!(
        a.pytorch_cuda_alloc_conf.as_deref(),
        Some("expandable_segments:True")
    );
    assert_eq!(a.max_split_size, Some(1 << 30));
    assert_eq!(a.garbage_collection_threshold, Some(0.6));
    assert_eq!(a.expandable_segments, Some(true));
    assert_eq!(
        a.roundup_power2_divisions,
        Some(RoundupPower2Divisions::PerBucket(vec![
            (1, 4),
            (2, 4),
            (4, 8)
        ]))
    );
    assert_eq!(
        a.other,
        [(
            "some_future_knob".to_owned(),
            Value::List(vec![Value::Int(1), Value::Int(2), Value::Int(3)])
        )]
    );
    assert_eq!(s.external_annotations.len(), 1);
    assert_eq!(s.external_annotations[0].name, "step");
}

#[test]
fn snapshot_in_every_protocol() {
    for p in 0..=5 {
        let bytes = data(&format!("snapshot_p{p}.pickle"));
        let doc = pickle::parse(&bytes).unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        assert_eq!(doc.protocol(), if p < 2 { 0 } else { p });
        let s = read_snapshot(&bytes).unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        check_fixture_snapshot(&s);
    }
}

#[test]
fn ordered_dict_at_top_level() {
    let s = read_snapshot(&data("ordered_p2.pickle")).unwrap();
    check_fixture_snapshot(&s);
}

#[test]
fn legacy_bare_list_with_block_history() {
    let s = read_snapshot(&data("legacy_list_p2.pickle")).unwrap();
    assert!(s.device_traces.is_empty());
    assert_eq!(s.segments.len(), 1);
    let g = &s.segments[0];
    assert_eq!(
        (g.device, g.requested_size, g.segment_pool_id),
        (0, 0, (0, 0))
    );
    let b = &g.blocks;
    assert_eq!(b[0].address, None);
    assert_eq!(
        b[0].requested_size, b[0].size,
        "requested_size defaults to size"
    );
    assert_eq!(
        b[1].state,
        BlockState::ActivePendingFree,
        "old spelling active_awaiting_free"
    );
    let h = b[0].history.as_ref().unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].addr, h[0].real_size), (140_000_000_000_000, 1000));
    assert_eq!(frames(&s, h[0].frames).len(), 2);
    assert_eq!(b[1].history.as_deref(), Some(&[][..]));
    assert_eq!(b[2].history, None);
}

#[test]
fn generic_values_in_every_protocol() {
    let huge = BigInt(vec![5, 0, 0, 0, 0, 0, 0, 0, 1].into());
    let neg_huge = BigInt(vec![0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe].into());
    for p in 0..=5 {
        let bytes = data(&format!("values_p{p}.pickle"));
        let doc = pickle::parse(&bytes).unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        let r = doc.root();
        let v = r.to_value().unwrap();
        let ints = match v.get("ints").unwrap() {
            Value::List(l) => l.clone(),
            other => panic!("{other:?}"),
        };
        let expect = [
            Value::Int(0),
            Value::Int(1),
            Value::Int(-1),
            Value::Int(255),
            Value::Int(256),
            Value::Int(65535),
            Value::Int(65536),
            Value::Int(-(1 << 31)),
            Value::Int(1 << 31),
            Value::Int(1 << 62),
            Value::Int(i64::MIN),
            Value::BigInt(BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0].into())),
            Value::BigInt(BigInt(vec![0xff; 8].into_iter().chain([0]).collect())),
            Value::BigInt(huge.clone()),
            Value::BigInt(neg_huge.clone()),
        ];
        assert_eq!(ints, expect, "protocol {p}");
        let ir = r.get("ints").unwrap().as_seq().unwrap();
        assert_eq!(ir.get(12).unwrap().as_u64(), Some(u64::MAX));
        assert_eq!(ir.get(13).unwrap().as_u64(), None);
        assert_eq!(ir.get(11).unwrap().as_i64(), None);
        assert_eq!(
            v.get("floats").unwrap(),
            &Value::List(vec![
                Value::Float(0.0),
                Value::Float(-1.5),
                Value::Float(1e300),
                Value::Float(f64::INFINITY)
            ])
        );
        assert_eq!(
            v.get("text").unwrap(),
            &Value::List(vec![
                Value::Str(String::new()),
                Value::Str("ascii".into()),
                Value::Str("caf\u{e9} \u{2603} \u{1f600}".into()),
                Value::Str("x".repeat(300)),
            ]),
            "protocol {p}"
        );
        assert_eq!(
            v.get("bytes").unwrap(),
            &Value::List(vec![
                Value::Bytes(vec![]),
                Value::Bytes(vec![0, 255]),
                Value::ByteArray(b"ba".to_vec())
            ]),
            "protocol {p}"
        );
        assert_eq!(
            v.get("tuple").unwrap(),
            &Value::Tuple(vec![
                Value::Int(1),
                Value::Tuple(vec![Value::Int(2), Value::Int(3)]),
                Value::Tuple(vec![])
            ])
        );
        assert_eq!(
            v.get("set").unwrap(),
            &Value::Set(vec![Value::Int(1), Value::Int(2), Value::Int(3)])
        );
        assert_eq!(
            v.get("frozenset").unwrap(),
            &Value::FrozenSet(vec![Value::Str("a".into())])
        );
        let shared = r.get("shared").unwrap().as_seq().unwrap();
        assert!(
            shared.get(0).unwrap().same_object(shared.get(1).unwrap()),
            "protocol {p}: memo sharing"
        );
        let d = r.get("dict").unwrap().as_dict().unwrap();
        assert_eq!(d.len(), 4);
        let keys: Vec<String> = d.iter().map(|(k, _)| format!("{k:?}")).collect();
        assert_eq!(keys, ["1", "(1, 2)", "None", "2.5"]);
        let ordered: Vec<&str> = r
            .get("ordered")
            .unwrap()
            .as_dict()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        assert_eq!(ordered, ["b", "a"]);
        assert_eq!(
            v.get("flags").unwrap(),
            &Value::List(vec![Value::Bool(true), Value::Bool(false), Value::None])
        );
    }
}

#[test]
fn malicious_globals_are_refused() {
    match read_snapshot(&data("evil_global_p0.pickle")) {
        Err(e @ Error::ForbiddenGlobal { offset: 0, .. }) => {
            let Error::ForbiddenGlobal { module, name, .. } = &e else {
                unreachable!()
            };
            assert_eq!((module.as_str(), name.as_str()), ("os", "system"));
            let msg = e.to_string();
            assert!(msg.contains("os.system") && msg.contains("byte 0"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    match pickle::parse(&data("evil_stack_global_p4.pickle")) {
        Err(Error::ForbiddenGlobal {
            offset,
            module,
            name,
        }) => {
            assert_eq!(
                (offset, module.as_str(), name.as_str()),
                (20, "builtins", "eval")
            );
        }
        other => panic!("{other:?}"),
    }
    // whitelisted names in the wrong module are refused too
    let e = pickle::parse(b"cposix\nset\n)R.").unwrap_err();
    assert!(matches!(e, Error::ForbiddenGlobal { .. }), "{e}");
}

#[test]
fn every_truncation_reports_the_offset() {
    for name in [
        "snapshot_p0.pickle",
        "snapshot_p2.pickle",
        "snapshot_p4.pickle",
        "values_p1.pickle",
        "values_p5.pickle",
    ] {
        let bytes = data(name);
        for n in 0..bytes.len() {
            match read_snapshot(&bytes[..n]) {
                Err(Error::UnexpectedEof {
                    offset,
                    opcode_offset,
                    reading,
                }) => {
                    assert_eq!(offset, n, "{name} cut at {n}");
                    assert!(opcode_offset <= n);
                    assert!(!reading.is_empty());
                }
                other => panic!("{name} cut at {n}: {other:?}"),
            }
        }
    }
    let e = read_snapshot(&data("snapshot_p4.pickle")[..100]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("unexpected end of file at byte 100 while reading "),
        "{e}"
    );
}

#[test]
fn not_a_snapshot() {
    let e = read_snapshot(&data("not_snapshot_int.pickle")).unwrap_err();
    assert!(
        matches!(&e, Error::NotASnapshot { reason } if reason.contains("int")),
        "{e}"
    );
    let e = read_snapshot(&data("not_snapshot_dict.pickle")).unwrap_err();
    assert!(
        matches!(&e, Error::NotASnapshot { reason } if reason.contains("segments") && reason.contains("foo")),
        "{e}"
    );
    let e = read_snapshot(b"\x80\x04]\x94(K\x01K\x02e.").unwrap_err();
    assert!(matches!(e, Error::NotASnapshot { .. }), "{e}");
    // an empty bare list is an (empty) legacy snapshot
    assert!(read_snapshot(b"\x80\x02].").unwrap().segments.is_empty());
}

/// Pickle `{"segments": [], "device_traces": [[entry]]}` with a custom entry.
fn snapshot_with_entry(entry: Value) -> Vec<u8> {
    let v = Value::Dict(vec![
        (Value::Str("segments".into()), Value::List(vec![])),
        (
            Value::Str("device_traces".into()),
            Value::List(vec![Value::List(vec![entry])]),
        ),
    ]);
    let mut w = PickleWriter::new(Vec::new(), true);
    w.value(&v);
    w.finish().unwrap()
}

fn entry(addr: Value) -> Value {
    Value::Dict(vec![
        (Value::Str("action".into()), Value::Str("alloc".into())),
        (Value::Str("addr".into()), addr),
        (Value::Str("size".into()), Value::Int(512)),
        (Value::Str("stream".into()), Value::Int(0)),
    ])
}

#[test]
fn long1_big_ints_and_u64_fields() {
    // 2**63 needs 9 bytes in LONG1 but fits u64
    let b = snapshot_with_entry(entry(Value::BigInt(BigInt(
        vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0].into(),
    ))));
    assert!(b.windows(2).any(|w| w == [0x8a, 9]), "LONG1 with 9 bytes");
    let s = read_snapshot(&b).unwrap();
    assert_eq!(s.device_traces[0].get(0).unwrap().addr, 1 << 63);
    // u64::MAX
    let b = snapshot_with_entry(entry(Value::BigInt(BigInt(
        vec![0xff; 8].into_iter().chain([0]).collect(),
    ))));
    assert_eq!(
        read_snapshot(&b).unwrap().device_traces[0]
            .get(0)
            .unwrap()
            .addr,
        u64::MAX
    );
    // 2**64 + 5 does not fit: a clear schema error naming the field
    let b = snapshot_with_entry(entry(Value::BigInt(BigInt(
        vec![5, 0, 0, 0, 0, 0, 0, 0, 1].into(),
    ))));
    match read_snapshot(&b) {
        Err(Error::Schema { path, message, .. }) => {
            assert_eq!(path, "device_traces[0][0].addr");
            assert!(message.contains("does not fit in u64"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // negative addresses are refused
    let e = read_snapshot(&snapshot_with_entry(entry(Value::Int(-1)))).unwrap_err();
    assert!(e.to_string().contains("non-negative"), "{e}");
    // and a wrong type names the field and the types, and the byte of the
    // opcode that completed the entry's dict (EMPTY_DICT or SETITEMS)
    let b = snapshot_with_entry(entry(Value::Str("0x10".into())));
    let e = read_snapshot(&b).unwrap_err();
    let o = e.offset().expect("a bad trace entry names its byte");
    assert!(matches!(b[o as usize], b'}' | b'u'), "{e}");
    assert_eq!(
        e.to_string(),
        format!("bad snapshot field device_traces[0][0].addr: expected int, found str (the trace entry's dict completed at byte {o})")
    );
}

/// A frames list holding a list where a frame dict belongs (what a memo
/// index changed by one byte makes) deep in a long trace: the error names
/// the entry and a byte within its bytes, from memory and from a file.
#[test]
fn a_bad_trace_entry_names_its_byte() {
    let good = |a: i64| {
        Value::Dict(vec![
            (Value::Str("action".into()), Value::Str("alloc".into())),
            (Value::Str("addr".into()), Value::Int(a)),
            (Value::Str("size".into()), Value::Int(512)),
            (Value::Str("stream".into()), Value::Int(0)),
            (Value::Str("frames".into()), Value::List(vec![])),
        ])
    };
    let mut entries: Vec<Value> = (0..3000).map(|i| good(4096 * i)).collect();
    entries[2000] = Value::Dict(vec![
        (Value::Str("action".into()), Value::Str("alloc".into())),
        (Value::Str("addr".into()), Value::Int(1 << 40)),
        (Value::Str("size".into()), Value::Int(512)),
        (Value::Str("stream".into()), Value::Int(0)),
        (
            Value::Str("compile_context".into()),
            Value::Str("MARKER-2000".into()),
        ),
        (
            Value::Str("frames".into()),
            Value::List(vec![Value::List(vec![])]),
        ),
    ]);
    let v = Value::Dict(vec![
        (Value::Str("segments".into()), Value::List(vec![])),
        (
            Value::Str("device_traces".into()),
            Value::List(vec![Value::List(entries)]),
        ),
    ]);
    let mut w = PickleWriter::new(Vec::new(), true);
    w.value(&v);
    let b = w.finish().unwrap();
    let marker = b.windows(11).position(|x| x == b"MARKER-2000").unwrap() as u64;
    let dir = std::env::temp_dir().join(format!("vramscope-bad-entry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.pickle");
    std::fs::write(&path, &b).unwrap();
    for e in [
        read_snapshot(&b).unwrap_err(),
        read_snapshot_sequential(&b).unwrap_err(),
        read_snapshot_file(&path).unwrap_err(),
        read_snapshot_file_lexed(&path).unwrap_err(),
    ] {
        let msg = e.to_string();
        assert!(
            msg.starts_with("bad snapshot field device_traces[0][2000].frames: frames[0]: expected a frame dict, found list"),
            "{msg}"
        );
        let o = e.offset().expect("the byte is named");
        assert!(msg.contains(&format!("byte {o}")), "{msg}");
        // within the entry: its EMPTY_DICT before the marker, its SETITEMS after
        assert!(o.abs_diff(marker) < 128, "{msg}: marker at byte {marker}");
        assert!(matches!(b[o as usize], b'}' | b'u'), "{msg}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memo_identity_and_mutation_after_sharing() {
    // L = []; outer = [L, L]; L.append(7)  -> both slots see [7]
    let p = pickle::parse(b"\x80\x02]q\x00(h\x00h\x00lh\x00K\x07a0.").unwrap();
    let outer = p.root().as_seq().unwrap();
    let (a, b) = (outer.get(0).unwrap(), outer.get(1).unwrap());
    assert!(a.same_object(b));
    assert_eq!(a.to_value().unwrap(), Value::List(vec![Value::Int(7)]));
    // the same through a dict that was mutated after being stored
    let p =
        pickle::parse(b"\x80\x02}q\x00]q\x01(h\x00h\x00eh\x00X\x01\x00\x00\x00kK\x01s0.").unwrap();
    let v = p.root().to_value().unwrap();
    let d = Value::Dict(vec![(Value::Str("k".into()), Value::Int(1))]);
    assert_eq!(v, Value::List(vec![d.clone(), d]));
}

/// The memo keeps 4-byte cells until a value needs 8 (a memoized int that
/// does not fit 28 bits): from then on it holds both kinds.
#[test]
fn memoized_values_of_every_width() {
    // l = ["s", []]; then memoize 1 << 40, -5, 3 and get everything back
    let mut b = b"\x80\x04]\x94(\x8c\x01s\x94]\x94".to_vec();
    b.extend(b"\x8a\x06\x00\x00\x00\x00\x00\x01\x94"); // 1 << 40
    b.extend(b"J\xfb\xff\xff\xff\x94"); // -5
    b.extend(b"K\x03\x94"); // 3
    b.extend(b"h\x01h\x02h\x03h\x04h\x05e.");
    let v = pickle::parse(&b).unwrap().root().to_value().unwrap();
    let (s, l) = (Value::Str("s".into()), Value::List(vec![]));
    let (big, neg, three) = (Value::Int(1 << 40), Value::Int(-5), Value::Int(3));
    assert_eq!(
        v,
        Value::List(vec![
            s.clone(),
            l.clone(),
            big.clone(),
            neg.clone(),
            three.clone(),
            s,
            l,
            big,
            neg,
            three
        ])
    );
}

#[test]
fn recursive_structures_do_not_hang() {
    // L = [L]
    let p = pickle::parse(b"\x80\x02]q\x00h\x00a.").unwrap();
    let l = p.root();
    assert!(l.as_seq().unwrap().get(0).unwrap().same_object(l));
    assert!(matches!(l.to_value(), Err(Error::LimitExceeded { .. })));
    let _ = format!("{l:?}");
}

#[test]
fn python_dict_and_set_semantics() {
    // {1: 2, 1: 3} -> {1: 3}; True == 1 keeps the first key
    let v = pickle::parse(b"}(K\x01K\x02K\x01K\x03u.")
        .unwrap()
        .root()
        .to_value()
        .unwrap();
    assert_eq!(v, Value::Dict(vec![(Value::Int(1), Value::Int(3))]));
    let v = pickle::parse(b"}(\x88K\x02K\x01K\x03u.")
        .unwrap()
        .root()
        .to_value()
        .unwrap();
    assert_eq!(v, Value::Dict(vec![(Value::Bool(true), Value::Int(3))]));
    // a big dict (past the linear-scan size) with duplicates
    let mut b = b"}(".to_vec();
    for i in 0..100u8 {
        b.extend([b'K', i, b'K', i]);
    }
    b.extend(b"K\x05K\xffu.");
    let v = pickle::parse(&b).unwrap().root().to_value().unwrap();
    match v {
        Value::Dict(d) => {
            assert_eq!(d.len(), 100);
            assert_eq!(d[5], (Value::Int(5), Value::Int(255)));
        }
        other => panic!("{other:?}"),
    }
    // sets dedup, tuples of equal content are equal keys
    let v = pickle::parse(b"\x8f(K\x01K\x02K\x01\x90.")
        .unwrap()
        .root()
        .to_value()
        .unwrap();
    assert_eq!(v, Value::Set(vec![Value::Int(1), Value::Int(2)]));
    let v = pickle::parse(b"}(K\x01K\x02\x86K\x01K\x01K\x02\x86K\x02u.")
        .unwrap()
        .root()
        .to_value()
        .unwrap();
    assert_eq!(
        v,
        Value::Dict(vec![(
            Value::Tuple(vec![Value::Int(1), Value::Int(2)]),
            Value::Int(2)
        )])
    );
    // unhashable key
    let e = pickle::parse(b"}(]K\x01u.").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unhashable {
                kind: "list",
                opcode: "SETITEMS",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn malformed_inputs_give_typed_errors() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "UnexpectedEof"),
        (b"\x80\x06N.", "UnsupportedProtocol"),
        (b"\xff", "UnknownOpcode"),
        (b".", "StackUnderflow"),
        (b"h\x05.", "MemoMissing"),
        (b"t.", "MarkMissing"),
        (b"\x8b\xff\xff\xff\xff", "InvalidArgument"),
        (b"X\xff\xff\xff\xff", "UnexpectedEof"),
        (b"\x8e\xff\xff\xff\xff\xff\xff\xff\x7f", "UnexpectedEof"),
        (b"\x95\x00\x00\x00\x00\x01\x00\x00\x00N.", "UnexpectedEof"),
        (b"Pabc\n.", "UnsupportedOpcode"),
        (b"\x82\x01.", "UnsupportedOpcode"),
        (b"](K\x01u.", "WrongType"),
        (b"}(K\x01u.", "InvalidArgument"),
        (b"N(b.", "StackUnderflow"),
        (b"N(\x85.", "StackUnderflow"),
        (b"]}(K\x01K\x01ub.", "UnsupportedOpcode"),
        (b"Inot a number\n.", "InvalidArgument"),
        (b"S'unterminated\n.", "InvalidArgument"),
    ];
    for (bytes, want) in cases {
        let e = pickle::parse(bytes).unwrap_err();
        assert!(
            format!("{e:?}").starts_with(want),
            "{bytes:?}: got {e:?}, want {want}"
        );
        assert!(!e.to_string().is_empty());
    }
    // BUILD with empty state is accepted (no attributes are set)
    assert!(pickle::parse(b"}}b.").is_ok());
    // trailing bytes after STOP are ignored, as pickle.loads does
    assert_eq!(
        pickle::parse(b"K\x07.garbage").unwrap().root().as_i64(),
        Some(7)
    );
}

#[test]
fn writer_round_trips_the_real_snapshot() {
    let real = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
    );
    let a = read_snapshot_file(real).unwrap();
    for framing in [true, false] {
        let bytes = snapshot_to_bytes(
            &a,
            &WriteOptions {
                framing,
                ..Default::default()
            },
        );
        let b = read_snapshot(&bytes).unwrap();
        assert_eq!(a.segments.len(), b.segments.len());
        for (x, y) in a.segments.iter().zip(&b.segments) {
            assert_eq!(
                (x.address, x.total_size, x.blocks.len()),
                (y.address, y.total_size, y.blocks.len())
            );
            assert_eq!(frames(&a, x.frames), frames(&b, y.frames));
        }
        for (x, y) in a.device_traces[0].iter().zip(&b.device_traces[0]) {
            assert_eq!(
                (x.action, x.addr, x.size, x.time_us),
                (y.action, y.addr, y.size, y.time_us)
            );
            assert_eq!(frames(&a, x.frames), frames(&b, y.frames));
            assert_eq!(
                x.compile_context.map(|c| a.str(c)),
                y.compile_context.map(|c| b.str(c))
            );
        }
        assert_eq!(a.allocator_settings, b.allocator_settings);
        assert_eq!(a.external_annotations, b.external_annotations);
    }
}

/// A reader that hands out at most `n` bytes per call.
struct Chunky<'a>(&'a [u8], usize);

impl std::io::Read for Chunky<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        self.1 = self.1 % 7 + 1;
        Ok(n)
    }
}

#[test]
fn streaming_reader_matches_slice_parse() {
    for name in [
        "snapshot_p0.pickle",
        "snapshot_p4.pickle",
        "values_p0.pickle",
        "values_p5.pickle",
    ] {
        let bytes = data(name);
        let a = pickle::parse(&bytes).unwrap().root().to_value().unwrap();
        let b = pickle::parse_reader(Chunky(&bytes, 1), None)
            .unwrap()
            .root()
            .to_value()
            .unwrap();
        assert_eq!(a, b, "{name}");
        for n in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            let e = pickle::parse_reader(Chunky(&bytes[..n], 3), Some(n as u64)).unwrap_err();
            assert!(
                matches!(e, Error::UnexpectedEof { offset, .. } if offset == n),
                "{name} cut at {n}: {e:?}"
            );
        }
    }
    // arguments and text lines larger than the 1 MiB buffer
    let big = "é".repeat(1_500_000);
    let mut b = vec![0x80, 4, b'X'];
    b.extend((big.len() as u32).to_le_bytes());
    b.extend(big.as_bytes());
    b.push(b'.');
    let v = pickle::parse_reader(Chunky(&b, 5), Some(b.len() as u64)).unwrap();
    assert_eq!(v.root().as_str(), Some(big.as_str()));
    let mut b = b"S'".to_vec();
    b.extend(std::iter::repeat_n(b'x', 3 << 20));
    b.extend(b"'\n.");
    let v = pickle::parse_reader(&b[..], None).unwrap();
    assert_eq!(v.root().as_str().map(str::len), Some(3 << 20));
    // and the file reader
    let real = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
    );
    let s = read_snapshot_file(real).unwrap();
    let t = read_snapshot(&std::fs::read(real).unwrap()).unwrap();
    assert_eq!(s.segments, t.segments);
    assert_eq!(s.device_traces, t.device_traces);
    let e = read_snapshot_file("/nonexistent/x.pickle").unwrap_err();
    assert!(
        matches!(e, Error::Io { .. }) && e.to_string().contains("/nonexistent/x.pickle"),
        "{e}"
    );
}

/// Build `{"segments": [], "device_traces": [[entry]], ...}` by hand so the
/// pickle can mutate things after they were stored; `after(w, entry_memo,
/// frames_memo)` runs before STOP with the root dict on the stack and may
/// also add top-level items (`extra` runs inside the root's SETITEMS).
fn crafted(
    extra: impl Fn(&mut PickleWriter<Vec<u8>>, u32),
    after: impl Fn(&mut PickleWriter<Vec<u8>>, u32, u32),
) -> Vec<u8> {
    let mut w = PickleWriter::new(Vec::new(), false);
    w.empty_dict();
    w.mark();
    w.str("segments");
    w.empty_list();
    w.str("device_traces");
    w.empty_list();
    w.empty_list();
    let e = w.empty_dict();
    w.mark();
    for (k, v) in [("action", None), ("addr", Some(4096)), ("size", Some(512))] {
        w.str(k);
        match v {
            Some(i) => w.int(i),
            None => w.str("alloc"),
        }
    }
    w.str("frames");
    let l = w.empty_list();
    w.empty_dict();
    w.mark();
    w.str("name");
    w.str("f");
    w.str("filename");
    w.str("a.py");
    w.str("line");
    w.int(1);
    w.raw(b"u");
    w.raw(b"a"); // frame into frames list
    w.raw(b"u"); // entry items
    w.raw(b"a"); // entry into device list
    w.raw(b"a"); // device list into device_traces
    extra(&mut w, e);
    w.raw(b"u"); // root items
    after(&mut w, e, l);
    w.finish().unwrap()
}

#[test]
fn fast_path_falls_back_when_absorbed_entries_change() {
    // untouched: the fast path result
    let s = read_snapshot(&crafted(|_, _| {}, |_, _, _| {})).unwrap();
    assert_eq!(s.device_traces[0].get(0).unwrap().size, 512);
    assert_eq!(
        frames(&s, s.device_traces[0].get(0).unwrap().frames).len(),
        1
    );

    // the entry dict is mutated after it was stored: Python sees size 999
    let b = crafted(
        |_, _| {},
        |w, e, _| {
            w.get(e);
            w.str("size");
            w.int(999);
            w.raw(b"s0");
        },
    );
    assert_eq!(
        read_snapshot(&b).unwrap().device_traces[0]
            .get(0)
            .unwrap()
            .size,
        999
    );

    // its frames list grows afterwards: Python sees two frames
    let b = crafted(
        |_, _| {},
        |w, _, l| {
            w.get(l);
            w.empty_dict();
            w.mark();
            w.str("name");
            w.str("g");
            w.str("filename");
            w.str("b.py");
            w.str("line");
            w.int(2);
            w.raw(b"u");
            w.raw(b"a0");
        },
    );
    let s = read_snapshot(&b).unwrap();
    let f = frames(&s, s.device_traces[0].get(0).unwrap().frames);
    assert_eq!(
        f,
        [
            ("f".into(), "a.py".into(), 1),
            ("g".into(), "b.py".into(), 2)
        ]
    );

    // the same entry dict also appears under another top-level key
    let b = crafted(
        |w, e| {
            w.str("extra");
            w.get(e);
        },
        |_, _, _| {},
    );
    let s = read_snapshot(&b).unwrap();
    assert_eq!(s.device_traces[0].get(0).unwrap().addr, 4096);
    assert_eq!(s.other.len(), 1);
    assert_eq!(s.other[0].1.get("size"), Some(&Value::Int(512)));

    // ... and is passed to dict(): the whitelisted call needs its items
    let b = crafted(
        |w, e| {
            w.str("copy");
            w.raw(b"cbuiltins\ndict\n");
            w.get(e);
            w.raw(b"\x85R");
        },
        |_, _, _| {},
    );
    let s = read_snapshot(&b).unwrap();
    assert_eq!(s.other[0].0, "copy");
    assert_eq!(
        s.other[0].1.get("action"),
        Some(&Value::Str("alloc".into()))
    );

    // every variant through the file reader too
    let dir = std::env::temp_dir().join(format!("vramscope-snapshot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("crafted.pickle");
    std::fs::write(&path, &b).unwrap();
    assert_eq!(read_snapshot_file(&path).unwrap().other[0].0, "copy");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Write an entry dict `{"action": "alloc", "addr": addr, "size": 512,
/// "frames": []}`; returns its memo index.
fn entry_dict(w: &mut PickleWriter<Vec<u8>>, addr: i64) -> u32 {
    let m = w.empty_dict();
    w.mark();
    w.str("action");
    w.str("alloc");
    w.str("addr");
    w.int(addr);
    w.str("size");
    w.int(512);
    w.str("frames");
    w.empty_list();
    w.raw(b"u");
    m
}

/// A list of entry dicts with these addresses, appended in one batch.
fn entry_list(w: &mut PickleWriter<Vec<u8>>, addrs: &[i64]) -> u32 {
    let l = w.empty_list();
    w.mark();
    for &a in addrs {
        entry_dict(w, a);
    }
    w.raw(b"e");
    l
}

fn addrs(t: &Trace) -> Vec<u64> {
    t.iter().map(|e| e.addr).collect()
}

/// Device traces are kept without their items while decoding (only which
/// entries they hold); whatever the pickle does with those lists, the
/// result is what `pickle.load` sees.
#[test]
fn trace_lists_shared_extended_or_split_over_devices() {
    let root = |w: &mut PickleWriter<Vec<u8>>| {
        w.empty_dict();
        w.mark();
        w.str("segments");
        w.empty_list();
        w.str("device_traces");
        w.empty_list();
        w.mark();
    };
    // Three devices, the first list stored twice.
    let mut w = PickleWriter::new(Vec::new(), false);
    root(&mut w);
    let l0 = entry_list(&mut w, &[1, 2]);
    w.get(l0);
    entry_list(&mut w, &[3]);
    w.raw(b"e"); // the device lists
    w.raw(b"u");
    let s = read_snapshot(&w.finish().unwrap()).unwrap();
    let got: Vec<Vec<u64>> = s.device_traces.iter().map(addrs).collect();
    assert_eq!(got, [vec![1, 2], vec![1, 2], vec![3]]);

    // A list that grows after it was stored, by entries and something else.
    for tail in [&[3i64, 4][..], &[]] {
        let mut w = PickleWriter::new(Vec::new(), false);
        root(&mut w);
        let l0 = entry_list(&mut w, &[1, 2]);
        w.raw(b"e");
        w.raw(b"u");
        w.get(l0);
        w.mark();
        for &a in tail {
            entry_dict(&mut w, a);
        }
        w.int(7);
        w.raw(b"e0");
        let b = w.finish().unwrap();
        let e = read_snapshot(&b).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "device_traces[0][{}]: expected a trace entry dict, found int",
                2 + tail.len()
            )),
            "{e}"
        );
    }
    // Without the int, the entries are all there.
    let mut w = PickleWriter::new(Vec::new(), false);
    root(&mut w);
    let l0 = entry_list(&mut w, &[1, 2]);
    w.raw(b"e");
    w.raw(b"u");
    w.get(l0);
    w.mark();
    entry_dict(&mut w, 3);
    entry_dict(&mut w, 4);
    w.raw(b"e0");
    let s = read_snapshot(&w.finish().unwrap()).unwrap();
    assert_eq!(addrs(&s.device_traces[0]), [1, 2, 3, 4]);

    // One entry dict in two devices' lists.
    let mut w = PickleWriter::new(Vec::new(), false);
    root(&mut w);
    w.empty_list();
    w.mark();
    let e = entry_dict(&mut w, 1);
    entry_dict(&mut w, 2);
    w.raw(b"e");
    w.empty_list();
    w.mark();
    w.get(e);
    entry_dict(&mut w, 3);
    w.raw(b"e");
    w.raw(b"e");
    w.raw(b"u");
    let s = read_snapshot(&w.finish().unwrap()).unwrap();
    let got: Vec<Vec<u64>> = s.device_traces.iter().map(addrs).collect();
    assert_eq!(got, [vec![1, 2], vec![1, 3]]);
}

/// Frames lists are recognised by their bytes (`MARK`, memo gets,
/// `APPENDS`): the same bytes must still mean what Python reads when a memo
/// index is stored again with another object, and when the items were
/// still being built the first time.
#[test]
fn lists_of_memo_gets_read_as_python_does() {
    // [a, b] = two dicts; L1 = [a, b]; memo[a] = c (BINPUT); L2 = [memo[a], b]
    let mut w = PickleWriter::new(Vec::new(), false);
    w.empty_list(); // the outer list
    w.mark();
    let dict = |w: &mut PickleWriter<Vec<u8>>, k: i64| {
        let m = w.empty_dict();
        w.str("k");
        w.int(k);
        w.raw(b"s");
        m
    };
    let a = dict(&mut w, 1);
    let b = dict(&mut w, 2);
    w.raw(b"0"); // pop b
    w.raw(b"0"); // pop a
    for again in [false, true] {
        if again {
            dict(&mut w, 3);
            w.raw(&[b'q', a as u8]); // BINPUT over a's memo index
            w.raw(b"0");
        }
        w.empty_list();
        w.mark();
        w.get(a);
        w.get(b);
        w.raw(b"e");
    }
    // a list of one list still being built, seen twice
    let inner = w.empty_list();
    w.raw(b"0");
    for _ in 0..2 {
        w.empty_list();
        w.mark();
        w.get(inner);
        w.get(inner);
        w.raw(b"e");
    }
    w.raw(b"e");
    let v = pickle::parse(&w.finish().unwrap())
        .unwrap()
        .root()
        .to_value()
        .unwrap();
    let d = |k| Value::Dict(vec![(Value::Str("k".into()), Value::Int(k))]);
    let e = Value::List(vec![]);
    assert_eq!(
        v,
        Value::List(vec![
            Value::List(vec![d(1), d(2)]),
            Value::List(vec![d(3), d(2)]),
            Value::List(vec![e.clone(), e.clone()]),
            Value::List(vec![e.clone(), e]),
        ])
    );
}
