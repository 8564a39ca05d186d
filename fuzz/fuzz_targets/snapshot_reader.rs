//! Fuzz the snapshot reader: any bytes must give `Ok` or a typed `Err`,
//! never a panic, hang or runaway allocation.
//!
//! ```text
//! cargo +nightly fuzz run snapshot_reader fuzz/corpus/snapshot_reader
//! ```
//! Seed the corpus with `crates/snapshot/tests/data/*.pickle`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fast = vramscope_snapshot::read_snapshot(data);
    // the generic fallback decoder on its own: never a panic, and it agrees
    // with the fast path on success/failure
    let generic = vramscope_snapshot::read_snapshot_generic(data);
    assert_eq!(fast.is_ok(), generic.is_ok());
    // the lex made before decoding (pieces of one frame each) refuses
    // nothing decoding accepts
    let lexed = vramscope_snapshot::check_bytes(data, Some(1));
    if lexed.is_err() {
        assert!(fast.is_err());
    }
    // an error naming a byte names one within the input, in its message
    for e in [fast.err(), generic.err(), lexed.err()].iter().flatten() {
        if let Some(o) = e.offset() {
            assert!(o <= data.len() as u64);
            assert!(e.to_string().contains(&format!("byte {o}")));
        }
    }
    // the trace decoded in pieces on three threads, where it does not give
    // up, is what the sequential reader reads (or refuses, as it does)
    if let Some(par) = vramscope_snapshot::read_parallel(data, 3) {
        match (par, vramscope_snapshot::read_snapshot_sequential(data)) {
            (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string()),
            (Ok(par), Ok(seq)) => {
                assert_eq!(par.segments, seq.segments);
                assert_eq!(par.device_traces, seq.device_traces);
                let (s, t) = (&par.stacks, &seq.stacks);
                assert_eq!(s.num_strs(), t.num_strs());
                assert_eq!(s.num_frames(), t.num_frames());
                assert_eq!(s.num_stacks(), t.num_stacks());
            }
            _ => panic!("parallel and sequential disagree"),
        }
    }
    let parsed = vramscope_snapshot::pickle::parse(data);
    // a trace entry decoded in one step is what its opcodes one by one make
    let stepwise = vramscope_snapshot::pickle::parse_stepwise(data);
    match (&parsed, &stepwise) {
        (Ok(p), Ok(q)) => assert_eq!(format!("{:?}", p.root()), format!("{:?}", q.root())),
        (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string()),
        _ => panic!("one step and one by one disagree"),
    }
    if let Ok(p) = parsed {
        let _ = p.root().to_value();
    }
    // the streaming path must agree with the slice path on success/failure
    let a = vramscope_snapshot::pickle::parse(data).is_ok();
    let b = vramscope_snapshot::pickle::parse_reader(data, Some(data.len() as u64)).is_ok();
    assert_eq!(a, b);
});
