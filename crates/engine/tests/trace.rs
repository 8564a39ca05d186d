//! The allocator trace of the `snapshot` case, event by event, against the
//! real `torch.cuda.memory._dump_snapshot` taken on the H100
//! (`tests/data/snapshot_trace.txt`, extracted by `tests/data/extract_trace.py`).

use vramscope_engine::nn::{Module, TransformerEncoderLayer};
use vramscope_engine::optim::Optimizer;
use vramscope_engine::{DType, Device, Runtime};

#[test]
fn snapshot_trace_is_identical_to_the_h100() {
    let truth: Vec<(String, u64)> = include_str!("data/snapshot_trace.txt")
        .lines()
        .map(|l| {
            let mut it = l.split(' ');
            (
                it.next().unwrap().to_string(),
                it.next().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let rt = Runtime::default();
    rt.record_memory_history(true);
    let mut enc = TransformerEncoderLayer::new(&rt, 1024, 16, 4096, 0.1, true, false).unwrap();
    enc.cuda().unwrap();
    let mut opt = Optimizer::adamw(enc.parameters());
    let ex = rt.randn(&[8, 512, 1024], DType::F32, Device::Cuda).unwrap();
    let mut loss = None;
    for _ in 0..3 {
        let l = {
            let y = enc.forward(&ex).unwrap();
            let sq = y.square().unwrap();
            drop(y);
            sq.mean().unwrap()
        };
        loss = Some(l);
        loss.as_ref().unwrap().backward().unwrap();
        opt.step().unwrap();
        opt.zero_grad();
    }
    let twin: Vec<(String, u64)> = rt
        .trace()
        .iter()
        .map(|e| (e.action.as_str().to_string(), e.size))
        .collect();
    for (i, (a, b)) in truth.iter().zip(&twin).enumerate() {
        assert_eq!(a, b, "trace entry {i} differs");
    }
    assert_eq!(truth.len(), twin.len());
    drop(loss);
}
