//! Single ops and modules measured on an H100 (`fixtures/ops/ops_h100.jsonl`,
//! recorded by `validation/ops_cases.sh`) against the twin
//! (`vramscope_testkit::ops`): every figure of every step must be equal,
//! and for the attention modules (`MultiheadAttention`,
//! `TransformerEncoderLayer`, their eval fast paths) every allocator event
//! of the GPU's trace too (`tests/data/ops_traces`).

use crate::common;

use common::{case_tests, Fixture, Step};
use vramscope_testkit::ops as cases;

const OPS: Fixture = Fixture {
    path: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/ops/ops_h100.jsonl"
    ),
    run: twin,
    width: 22,
};

fn twin(case: &str) -> Result<Vec<Step>, String> {
    let steps = cases::run(case).map_err(|e| e.to_string())?;
    Ok(steps
        .into_iter()
        .map(|(step, f)| {
            let figures = [
                f.allocated,
                f.peak,
                f.reserved,
                f.peak_reserved,
                f.requested,
            ];
            (step, figures)
        })
        .collect())
}

fn check(case: &str) {
    OPS.check(case);
}

#[test]
fn every_fixture_case_is_a_twin_case() {
    assert_eq!(OPS.cases(), cases::cases());
}

/// `cargo test -p vramscope-engine --test integration ops::summary -- --nocapture`
#[test]
fn summary() {
    OPS.summary(&cases::cases());
}

/// The twin's allocator trace of `case` must begin with the H100's, event
/// for event (`tests/data/ops_traces`, extracted from `fixtures/ops/traces.tar.xz`
/// by `tests/data/extract_ops_traces.py`; the GPU recording stops at the
/// snapshot after the last step, the twin's goes on to tear the case down).
fn check_trace(case: &str) {
    let file = format!(
        "{}/tests/data/ops_traces/{}.txt",
        env!("CARGO_MANIFEST_DIR"),
        case.replace(':', "_")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let truth: Vec<(String, u64)> = text
        .lines()
        .map(|l| {
            let (a, n) = l.split_once(' ').expect("action size");
            (a.to_string(), n.parse().expect("size"))
        })
        .collect();
    let (_, twin) = cases::run_traced(case).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert!(
        twin.len() >= truth.len(),
        "{case}: the twin's trace ({}) is shorter than the GPU's ({})",
        twin.len(),
        truth.len()
    );
    for (i, (g, t)) in truth.iter().zip(&twin).enumerate() {
        assert_eq!(
            g,
            t,
            "{case}: trace event {i} differs (GPU {g:?}, twin {t:?}); around it the GPU has {:?}",
            &truth[i.saturating_sub(3)..(i + 4).min(truth.len())]
        );
    }
}

case_tests! {
    check;
    linear2d_fp32 => "linear2d:fp32",
    linear2d_bf16 => "linear2d:bf16",
    linear3d_fp32 => "linear3d:fp32",
    linear3d_bf16 => "linear3d:bf16",
    gelu_fp32 => "gelu:fp32",
    gelu_bf16 => "gelu:bf16",
    relu_fp32 => "relu:fp32",
    relu_bf16 => "relu:bf16",
    sigmoid_fp32 => "sigmoid:fp32",
    sigmoid_bf16 => "sigmoid:bf16",
    silu_fp32 => "silu:fp32",
    silu_bf16 => "silu:bf16",
    dropout_fp32 => "dropout:fp32",
    dropout_bf16 => "dropout:bf16",
    layernorm_fp32 => "layernorm:fp32",
    layernorm_bf16 => "layernorm:bf16",
    embedding_fp32 => "embedding:fp32",
    embedding_bf16 => "embedding:bf16",
    mse_fp32 => "mse:fp32",
    mse_bf16 => "mse:bf16",
    ce_fp32 => "ce:fp32",
    ce_bf16 => "ce:bf16",
    seq_fp32 => "seq:fp32",
    seq_bf16 => "seq:bf16",
    mha_w_fp32 => "mha_w:fp32",
    mha_w_bf16 => "mha_w:bf16",
    mha_now_fp32 => "mha_now:fp32",
    mha_now_bf16 => "mha_now:bf16",
    mha_fast_fp32 => "mha_fast:fp32",
    mha_fast_bf16 => "mha_fast:bf16",
    enc_post_fp32 => "enc_post:fp32",
    enc_post_bf16 => "enc_post:bf16",
    enc_pre_fp32 => "enc_pre:fp32",
    enc_pre_bf16 => "enc_pre:bf16",
    enc_fast_fp32 => "enc_fast:fp32",
    enc_fast_bf16 => "enc_fast:bf16",
    enc_fast_pre_fp32 => "enc_fast_pre:fp32",
    enc_fast_pre_bf16 => "enc_fast_pre:bf16",
}

// attention: every allocation of the MultiheadAttention / TransformerEncoderLayer
// cases in the GPU's order (SDPA backends, fast paths, backward nodes)
case_tests! {
    check_trace;
    trace_mha_w_fp32 => "mha_w:fp32",
    trace_mha_w_bf16 => "mha_w:bf16",
    trace_mha_now_fp32 => "mha_now:fp32",
    trace_mha_now_bf16 => "mha_now:bf16",
    trace_mha_fast_fp32 => "mha_fast:fp32",
    trace_mha_fast_bf16 => "mha_fast:bf16",
    trace_enc_post_fp32 => "enc_post:fp32",
    trace_enc_post_bf16 => "enc_post:bf16",
    trace_enc_pre_fp32 => "enc_pre:fp32",
    trace_enc_pre_bf16 => "enc_pre:bf16",
    trace_enc_fast_fp32 => "enc_fast:fp32",
    trace_enc_fast_bf16 => "enc_fast:bf16",
    trace_enc_fast_pre_fp32 => "enc_fast_pre:fp32",
    trace_enc_fast_pre_bf16 => "enc_fast_pre:bf16",
}
