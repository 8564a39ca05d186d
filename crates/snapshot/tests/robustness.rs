//! Property-style robustness: random bytes, truncations and mutations of
//! real and generated pickles must never panic, hang or blow up memory;
//! adversarial pickles must stay linear.

use std::time::{Duration, Instant};

use vramscope_snapshot::pickle;
use vramscope_snapshot::{
    check_bytes, check_file, memo_table_bytes, read_snapshot, read_snapshot_file,
    read_snapshot_file_lexed, Error,
};

const REAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
);

use vramscope_testkit::synth::Rng;
use vramscope_testkit::xz::fixture_bytes;

/// Decode both ways; any outcome but a panic is fine.
fn exercise(bytes: &[u8]) {
    let parsed = pickle::parse(bytes);
    // a trace entry decoded in one step is what its opcodes one by one make
    let stepwise = pickle::parse_stepwise(bytes);
    match (&parsed, &stepwise) {
        (Ok(p), Ok(q)) => assert_eq!(format!("{:?}", p.root()), format!("{:?}", q.root())),
        (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string()),
        _ => panic!("one step {parsed:?}, one by one {stepwise:?}"),
    }
    if let Ok(p) = parsed {
        let _ = p.root().to_value();
    }
    let fast = read_snapshot(bytes);
    // the generic fallback alone agrees with the fast path on success
    let generic = vramscope_snapshot::read_snapshot_generic(bytes);
    assert_eq!(fast.is_ok(), generic.is_ok(), "{fast:?} / {generic:?}");
    // the lex made before decoding refuses nothing decoding accepts
    let lexed = check_bytes(bytes, Some(1));
    if let Err(e) = &lexed {
        assert!(fast.is_err(), "the lex refused what decoding accepts: {e}");
    }
    for e in [fast.err(), generic.err(), lexed.err()].iter().flatten() {
        assert_clear(e, bytes.len());
    }
}

/// A decoding error names a byte within the input, in its message; only
/// errors about the whole input (its type, a schema field, a budget) name
/// none.
fn assert_clear(e: &Error, len: usize) {
    let msg = e.to_string();
    match e.offset() {
        Some(o) => {
            assert!(o <= len as u64, "{msg}: byte {o} past the input's {len}");
            assert!(
                msg.contains(&format!("byte {o}")),
                "{msg}: byte {o} not named"
            );
        }
        None => assert!(
            matches!(
                e,
                Error::NotAPickle { .. }
                    | Error::NotASnapshot { .. }
                    | Error::Schema { .. }
                    | Error::ExpansionLimit { .. }
                    | Error::LimitExceeded { offset: None, .. }
            ),
            "{msg}: no byte named"
        ),
    }
    assert!(!msg.is_empty());
}

fn fixtures() -> Vec<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "pickle"))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(1);
    // bias towards valid opcodes so the VM gets deep
    const OPS: &[u8] = b"(.0123FIJKLMNRSTUVXabcdeghijlopqrstu}])GBC\x80\x81\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96";
    for i in 0..20_000 {
        let len = rng.index(64);
        let mut b = Vec::with_capacity(len + 2);
        if i % 2 == 0 {
            b.extend([0x80, 4]);
        }
        for _ in 0..len {
            b.push(if rng.index(4) == 0 {
                rng.next_u64() as u8
            } else {
                OPS[rng.index(OPS.len())]
            });
        }
        exercise(&b);
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng(2);
    for base in fixtures() {
        for _ in 0..400 {
            let mut b = base.clone();
            for _ in 0..1 + rng.index(4) {
                let i = rng.index(b.len());
                match rng.index(3) {
                    0 => b[i] = rng.next_u64() as u8,
                    1 => {
                        b.remove(i);
                    }
                    _ => b.insert(i, rng.next_u64() as u8),
                }
            }
            exercise(&b);
        }
    }
}

#[test]
fn mutated_and_truncated_real_snapshot_never_panics() {
    let real = std::fs::read(REAL).unwrap();
    let mut rng = Rng(3);
    let iters = if cfg!(debug_assertions) { 60 } else { 2000 };
    for _ in 0..iters {
        let mut b = real.clone();
        for _ in 0..1 + rng.index(8) {
            let i = rng.index(b.len());
            b[i] = rng.next_u64() as u8;
        }
        exercise(&b);
        let cut = rng.index(real.len());
        match read_snapshot(&real[..cut]) {
            Err(Error::UnexpectedEof { offset, .. }) => assert_eq!(offset, cut),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

/// Ranges of a real snapshot moved, repeated or dropped (whole opcodes
/// and their arguments land where the memo, the marks and the frames do
/// not expect them): never a panic, every error names a byte.
#[test]
fn spliced_real_snapshot_never_panics() {
    let real = std::fs::read(REAL).unwrap();
    let mut rng = Rng(4);
    let iters = if cfg!(debug_assertions) { 40 } else { 1000 };
    for _ in 0..iters {
        let mut b = real.clone();
        for _ in 0..1 + rng.index(3) {
            let from = rng.index(b.len());
            let to = (from + 1 + rng.index(256)).min(b.len());
            let piece = b[from..to].to_vec();
            match rng.index(3) {
                0 => {
                    b.drain(from..to);
                }
                1 => {
                    let at = rng.index(b.len());
                    b.splice(at..at, piece);
                }
                _ => {
                    let at = rng.index(b.len() - piece.len() + 1);
                    b[at..at + piece.len()].copy_from_slice(&piece);
                }
            }
        }
        exercise(&b);
    }
}

fn assert_fast(what: &str, t: Instant) {
    let limit = Duration::from_secs(if cfg!(debug_assertions) { 20 } else { 3 });
    assert!(t.elapsed() < limit, "{what} took {:?}", t.elapsed());
}

#[test]
fn adversarial_inputs_stay_linear() {
    let n = 200_000;
    // L = []; then L.append(L) n times: freezing and thawing must not ping-pong
    let t = Instant::now();
    let mut b = b"\x80\x02]q\x00".to_vec();
    for _ in 0..n {
        b.extend(b"h\x00a");
    }
    b.push(b'.');
    let p = pickle::parse(&b).unwrap();
    assert_eq!(p.root().as_seq().unwrap().len(), n);
    assert!(matches!(
        p.root().to_value(),
        Err(Error::LimitExceeded { .. })
    ));
    assert_fast("self-append", t);

    // two lists appended into each other alternately
    let t = Instant::now();
    let mut b = b"\x80\x02]q\x00]q\x01".to_vec();
    for _ in 0..n / 2 {
        b.extend(b"h\x00h\x01ah\x01h\x00a00");
    }
    b.extend(b"h\x00.");
    pickle::parse(&b).unwrap();
    assert_fast("ping-pong", t);

    // nesting a million lists deep: no recursion while decoding or dropping
    let t = Instant::now();
    let depth = 1_000_000;
    let mut b = vec![b']'; depth];
    b.extend(std::iter::repeat_n(b'a', depth - 1));
    b.push(b'.');
    let p = pickle::parse(&b).unwrap();
    assert!(matches!(
        p.root().to_value(),
        Err(Error::LimitExceeded { .. })
    ));
    let _ = format!("{:?}", p.root());
    drop(p);
    assert_fast("deep nesting", t);

    // a tuple DAG of depth 64 (2^64 leaves) used as a dict key and set member
    let t = Instant::now();
    let mut b = b"\x80\x04}(C\x01x".to_vec();
    for _ in 0..64 {
        b.extend(b"2\x86"); // DUP, TUPLE2
    }
    b.extend(b"N\x94u\x8f(h\x00\x90.");
    assert!(pickle::parse(&b).is_ok());
    // ... and two equal but distinct DAGs compared: bounded by the work budget
    let mut b = b"\x80\x04}(C\x01x".to_vec();
    for _ in 0..64 {
        b.extend(b"2\x86");
    }
    b.extend(b"NC\x01x");
    for _ in 0..64 {
        b.extend(b"2\x86");
    }
    b.extend(b"Nu.");
    match pickle::parse(&b) {
        Ok(_) | Err(Error::LimitExceeded { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    assert_fast("tuple DAG keys", t);

    // memo puts at huge, scattered indices stay sparse
    let t = Instant::now();
    let mut b = b"N".to_vec();
    for i in 0..n as u32 {
        b.push(b'r');
        b.extend((u32::MAX - i * 7919).to_le_bytes());
    }
    b.push(b'.');
    assert!(pickle::parse(&b).is_ok());
    assert_fast("sparse memo", t);

    // length fields far beyond the input never allocate
    for b in [
        &b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f"[..],
        b"\x96\x00\x00\x00\x00\x00\x00\x01\x00",
        b"T\xff\xff\xff\x7f",
    ] {
        assert!(matches!(pickle::parse(b), Err(Error::UnexpectedEof { .. })));
        assert!(matches!(
            pickle::parse_reader(b, None),
            Err(Error::UnexpectedEof { .. })
        ));
    }
}

/// A file cut short is named truncated from its frame headers alone, with
/// the frame that runs past the end (issue 36: a multi-GB file fails at
/// once instead of after decoding everything before the cut).
#[test]
fn truncated_file_is_found_from_its_frames() {
    let real = std::fs::read(REAL).unwrap();
    let path = std::env::temp_dir().join(format!("vramscope-cut-{}.pickle", std::process::id()));
    for cut in [real.len() / 3, real.len() - 1] {
        std::fs::write(&path, &real[..cut]).unwrap();
        let e = read_snapshot_file(&path).unwrap_err();
        match e {
            Error::Truncated {
                frame_offset, len, ..
            } => {
                assert_eq!(len, cut as u64);
                assert!(frame_offset < len);
                assert!(e.to_string().contains("the file is truncated"), "{e}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// Frame headers damaged at random (lengths, opcodes), and cuts anywhere:
/// reading the file never panics, and a file that passes the frame walk
/// decodes exactly as the same bytes in memory do.
#[test]
fn damaged_frame_headers_never_panic() {
    let real = std::fs::read(REAL).unwrap();
    // where the frame headers are
    let mut heads = Vec::new();
    let mut pos = 2;
    while pos + 9 <= real.len() && real[pos] == 0x95 {
        heads.push(pos);
        pos += 9 + u64::from_le_bytes(real[pos + 1..pos + 9].try_into().unwrap()) as usize;
    }
    assert!(heads.len() > 2, "the fixture is framed");
    let path = std::env::temp_dir().join(format!("vramscope-frames-{}.pickle", std::process::id()));
    let mut rng = Rng(7);
    for _ in 0..if cfg!(debug_assertions) { 20 } else { 200 } {
        let mut b = real.clone();
        let h = heads[rng.index(heads.len())];
        let i = h + rng.index(9);
        b[i] = rng.next_u64() as u8;
        let cut = if rng.index(2) == 0 {
            b.len()
        } else {
            rng.index(b.len())
        };
        let b = &b[..cut];
        std::fs::write(&path, b).unwrap();
        let from_file = read_snapshot_file(&path);
        match (&from_file, read_snapshot(b)) {
            (Err(Error::Truncated { len, .. }), _) => assert_eq!(*len, cut as u64),
            (Ok(a), Ok(m)) => assert_eq!(a.trace_len(), m.trace_len()),
            (Err(_), Err(_)) => {}
            (a, m) => panic!("file and memory disagree at byte {i}, cut {cut}: {a:?} / {m:?}"),
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// A byte damaged anywhere in a real framed snapshot: the lex made before
/// decoding (here with a piece per frame, so the pieces are chained) never
/// refuses what decoding accepts, names every byte that is no opcode where
/// decoding does, and is what `read_snapshot_file` reports.
#[test]
fn damaged_bytes_are_named_by_the_lex_as_decoding_names_them() {
    let real = std::fs::read(REAL).unwrap();
    let path = std::env::temp_dir().join(format!("vramscope-lex-{}.pickle", std::process::id()));
    std::fs::write(&path, &real).unwrap();
    assert!(check_bytes(&real, Some(1)).is_ok());
    assert!(check_file(&path, None).is_ok());
    let whole = read_snapshot_file_lexed(&path).unwrap();
    assert_eq!(whole.trace_len(), read_snapshot(&real).unwrap().trace_len());
    let mut rng = Rng(36);
    let (mut named, mut unknown) = (0, 0);
    let n = if cfg!(debug_assertions) { 40 } else { 400 };
    for _ in 0..n {
        let mut b = real.clone();
        let i = 2 + rng.index(b.len() - 2);
        b[i] = rng.next_u64() as u8;
        let lexed = check_bytes(&b, Some(1));
        let decoded = read_snapshot(&b);
        if let (Err(e), Ok(_)) = (&lexed, &decoded) {
            panic!("byte {i}: the lex refused what decoding accepts: {e}");
        }
        if let Err(Error::UnknownOpcode { offset, .. }) = decoded {
            unknown += 1;
            match &lexed {
                Err(Error::UnknownOpcode { offset: o, .. }) => assert_eq!(*o, offset),
                other => panic!("byte {i}: decoding found 0x.. at {offset}, the lex {other:?}"),
            }
        }
        if let Err(e) = lexed {
            named += 1;
            std::fs::write(&path, &b).unwrap();
            assert_eq!(
                check_file(&path, Some(1)).unwrap_err().to_string(),
                e.to_string()
            );
            let from_file = read_snapshot_file_lexed(&path).unwrap_err();
            assert_eq!(from_file.to_string(), e.to_string());
            assert!(read_snapshot_file(&path).is_err());
        }
    }
    let _ = std::fs::remove_file(&path);
    eprintln!(
        "{named} of {n} damaged files refused by the lex, {unknown} with a byte that is no opcode"
    );
    assert!(named > n / 10 && unknown > 0, "{named} {unknown}");
}

/// The memo table (every `MEMOIZE`'s offset, in memo index order) of the
/// real snapshot is what Python's `pickletools.genops` lists (4061
/// `MEMOIZE`s, no other put; their offsets' sum and the previous opcodes'),
/// and so are the two real
/// nanoGPT snapshots', whatever the pieces; on
/// damaged and truncated copies, pieces of one frame give what one piece
/// gives (the same table or the same error), and a table names only
/// `MEMOIZE` bytes, in increasing order, each after its object's opcode.
#[test]
fn the_memo_table_is_pickletools_and_does_not_depend_on_the_pieces() {
    let real = std::fs::read(REAL).unwrap();
    let whole = Some(real.len() as u64 + 1);
    let full = memo_table_bytes(&real, Some(1)).unwrap();
    let t = full.clone().unwrap();
    assert_eq!(t.len(), 4061);
    // the opcode before each MEMOIZE: pickletools' previous op
    assert_eq!(
        &t[..3].iter().map(|e| e[0]).collect::<Vec<_>>(),
        &[11, 14, 25]
    );
    assert_eq!(t.iter().map(|e| e[0]).sum::<u64>(), 578_928_971);
    let t: Vec<u64> = t.iter().map(|e| e[1]).collect();
    assert_eq!(
        (&t[..3], &t[t.len() - 3..]),
        (&[12, 24, 26][..], &[268060, 268067, 268105][..])
    );
    assert_eq!(t.iter().sum::<u64>(), 579_054_553);
    assert_eq!(memo_table_bytes(&real, whole).unwrap(), full);
    assert_eq!(memo_table_bytes(&real, None).unwrap(), full);
    // the two real nanoGPT snapshots (H200): (MEMOIZEs, their offsets' sum)
    // from pickletools, no other put
    for (name, count, sums) in [
        (
            "nanogpt_2streams_oom_h200",
            38150,
            [45_209_599_651u64, 45_209_828_394],
        ),
        (
            "nanogpt_wrapped_3streams_expandable_oom_h200",
            49636,
            [73_799_315_200, 73_799_575_205],
        ),
    ] {
        let b = fixture_bytes(&format!("fixtures/snapshot_real/{name}.pickle.xz"));
        let t = memo_table_bytes(&b, Some(1 << 16)).unwrap().unwrap();
        let sum = |k: usize| t.iter().map(|e| e[k]).sum::<u64>();
        assert_eq!((t.len(), [sum(0), sum(1)]), (count, sums), "{name}");
        assert_eq!(
            memo_table_bytes(&b, Some(b.len() as u64 + 1))
                .unwrap()
                .unwrap(),
            t
        );
    }
    let mut rng = Rng(3636);
    let n = if cfg!(debug_assertions) { 40 } else { 300 };
    let (mut tabled, mut refused) = (0, 0);
    for k in 0..n {
        let mut b = real.clone();
        if k % 3 == 0 {
            b.truncate(2 + rng.index(b.len() - 2));
        } else {
            let i = 2 + rng.index(b.len() - 2);
            b[i] = rng.next_u64() as u8;
        }
        let framed = memo_table_bytes(&b, Some(1));
        let one = memo_table_bytes(&b, Some(b.len() as u64 + 1));
        match (&framed, &one) {
            (Ok(x), Ok(y)) => assert_eq!(x, y, "case {k}"),
            (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string(), "case {k}"),
            _ => panic!("case {k}: per frame {framed:?}, one piece {one:?}"),
        }
        match framed {
            Ok(Some(t)) => {
                tabled += 1;
                let ok = t.iter().all(|&[o, m]| o < m && b[m as usize] == 0x94);
                assert!(ok, "case {k}");
                assert!(t.windows(2).all(|w| w[0][1] <= w[1][0]), "case {k}");
            }
            Ok(None) => {}
            Err(_) => refused += 1,
        }
    }
    eprintln!("{tabled} of {n} damaged copies tabled, {refused} refused");
    assert!(tabled > 0 && refused > 0, "{tabled} {refused}");
}

/// The issue-36 file: a 2 KB snapshot whose extra key holds 60 nested
/// lists, each holding the previous one twice (2^60 values once expanded).
/// Reading it is refused with the budget named, after work bounded by the
/// file's size (the `copied` counter), not after hundreds of megabytes.
#[test]
fn nested_shared_lists_are_refused_after_work_bounded_by_the_file() {
    let key = |b: &mut Vec<u8>, s: &str| {
        b.push(0x8c); // SHORT_BINUNICODE
        b.push(s.len() as u8);
        b.extend(s.as_bytes());
    };
    let mut b = b"\x80\x04}(".to_vec(); // PROTO 4, EMPTY_DICT, MARK
    key(&mut b, "segments");
    b.push(b']');
    key(&mut b, "device_traces");
    b.extend(b"]]a");
    key(&mut b, "extra");
    b.extend(b"]\x940"); // memo 0 = [], popped
    for k in 1..=60u8 {
        // memo k = [memo k-1, memo k-1]
        b.extend([b']', 0x94, b'(', b'h', k - 1, b'h', k - 1, b'e']);
        if k < 60 {
            b.push(b'0');
        }
    }
    key(&mut b, "pad");
    b.push(b'X'); // BINUNICODE
    let pad = 2048 - b.len() - 6; // length, then `u.` after it
    b.extend((pad as u32).to_le_bytes());
    b.extend(std::iter::repeat_n(b'p', pad));
    b.extend(b"u.");
    assert_eq!(b.len(), 2048);

    let e = vramscope_snapshot::read_snapshot(&b).unwrap_err();
    let Error::ExpansionLimit {
        copied,
        budget,
        file_len,
    } = e
    else {
        panic!("expected the expansion limit, got {e}");
    };
    assert_eq!(file_len, 2048);
    assert!(budget <= 16 * 2048 + 64, "budget {budget}");
    assert!(copied <= budget, "copied {copied} of {budget}");
    let msg = e.to_string();
    assert!(
        msg.contains("expanding shared references") && msg.contains("2048-byte pickle"),
        "{msg}"
    );
}
