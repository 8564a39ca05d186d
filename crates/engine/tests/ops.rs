//! Single ops and modules measured on an H100 (`fixtures/ops/ops_h100.jsonl`,
//! recorded by `validation/ops_cases.sh`) against the twin
//! (`vramscope_engine::cases`): every figure of every step must be equal,
//! and for the attention modules (`MultiheadAttention`,
//! `TransformerEncoderLayer`, their eval fast paths) every allocator event
//! of the GPU's trace too (`tests/data/ops_traces`).

use vramscope_engine::cases;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/ops/ops_h100.jsonl"
);

const KEYS: [&str; 5] = [
    "allocated",
    "peak",
    "reserved",
    "peak_reserved",
    "requested",
];

struct Line {
    case: String,
    step: String,
    figures: [i64; 5],
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let i = line.find(&pat)? + pat.len();
    let rest = line[i..].trim_start();
    if let Some(r) = rest.strip_prefix('"') {
        Some(&r[..r.find('"')?])
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

fn fixture() -> Vec<Line> {
    let text =
        std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| panic!("reading {FIXTURE}: {e}"));
    text.lines()
        .filter_map(|l| {
            let case = field(l, "case")?.to_string();
            let step = field(l, "step")?.to_string();
            let mut figures = [0i64; 5];
            for (k, f) in KEYS.iter().zip(figures.iter_mut()) {
                *f = field(l, k)?.parse().ok()?;
            }
            Some(Line {
                case,
                step,
                figures,
            })
        })
        .collect()
}

/// Compare one case; returns (steps in the fixture, differing steps, lines of difference).
fn diff_case(case: &str) -> (usize, usize, Vec<String>) {
    let truth: Vec<Line> = fixture().into_iter().filter(|l| l.case == case).collect();
    assert!(!truth.is_empty(), "no fixture lines for {case}");
    let twin = match cases::run(case) {
        Ok(t) => t,
        Err(e) => return (truth.len(), truth.len(), vec![format!("{case}: {e}")]),
    };
    let mut diffs = Vec::new();
    let mut bad = 0;
    if twin.len() != truth.len() {
        diffs.push(format!(
            "{case}: {} steps in the fixture, {} in the twin",
            truth.len(),
            twin.len()
        ));
    }
    for (t, (step, f)) in truth.iter().zip(&twin) {
        assert_eq!(&t.step, step, "{case}: step order");
        let got = [
            f.allocated,
            f.peak,
            f.reserved,
            f.peak_reserved,
            f.requested,
        ];
        let mut ok = true;
        for i in 0..5 {
            if t.figures[i] != got[i] {
                ok = false;
                diffs.push(format!(
                    "{case} {}: {} truth {} twin {} (diff {})",
                    t.step,
                    KEYS[i],
                    t.figures[i],
                    got[i],
                    got[i] - t.figures[i]
                ));
            }
        }
        if !ok {
            bad += 1;
        }
    }
    bad += truth.len().saturating_sub(twin.len());
    (truth.len(), bad, diffs)
}

fn check(case: &str) {
    let (_, _, d) = diff_case(case);
    assert!(
        d.is_empty(),
        "{case} differs from the H100:\n{}",
        d.join("\n")
    );
}

#[test]
fn every_fixture_case_is_a_twin_case() {
    let mut got: Vec<String> = fixture().into_iter().map(|l| l.case).collect();
    got.dedup();
    assert_eq!(got, cases::cases());
}

/// `cargo test -p vramscope-engine --test ops summary -- --nocapture`
#[test]
fn summary() {
    let (mut exact, mut total) = (0, 0);
    for case in cases::cases() {
        let (n, bad, d) = diff_case(&case);
        total += n;
        exact += n - bad;
        eprintln!(
            "{case:22} {}/{} steps exact{}",
            n - bad,
            n,
            if d.is_empty() {
                String::new()
            } else {
                format!("\n    {}", d.join("\n    "))
            }
        );
    }
    eprintln!("TOTAL {exact}/{total} steps exact");
}

macro_rules! case_test {
    ($name:ident, $case:expr) => {
        #[test]
        fn $name() {
            check($case);
        }
    };
}

/// The twin's allocator trace of `case` must begin with the H100's, event
/// for event (`tests/data/ops_traces`, extracted from `fixtures/ops/traces.tgz`
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

macro_rules! trace_test {
    ($name:ident, $case:expr) => {
        #[test]
        fn $name() {
            check_trace($case);
        }
    };
}

case_test!(linear2d_fp32, "linear2d:fp32");
case_test!(linear2d_bf16, "linear2d:bf16");
case_test!(linear3d_fp32, "linear3d:fp32");
case_test!(linear3d_bf16, "linear3d:bf16");
case_test!(gelu_fp32, "gelu:fp32");
case_test!(gelu_bf16, "gelu:bf16");
case_test!(relu_fp32, "relu:fp32");
case_test!(relu_bf16, "relu:bf16");
case_test!(sigmoid_fp32, "sigmoid:fp32");
case_test!(sigmoid_bf16, "sigmoid:bf16");
case_test!(silu_fp32, "silu:fp32");
case_test!(silu_bf16, "silu:bf16");
case_test!(dropout_fp32, "dropout:fp32");
case_test!(dropout_bf16, "dropout:bf16");
case_test!(layernorm_fp32, "layernorm:fp32");
case_test!(layernorm_bf16, "layernorm:bf16");
case_test!(embedding_fp32, "embedding:fp32");
case_test!(embedding_bf16, "embedding:bf16");
case_test!(mse_fp32, "mse:fp32");
case_test!(mse_bf16, "mse:bf16");
case_test!(ce_fp32, "ce:fp32");
case_test!(ce_bf16, "ce:bf16");
case_test!(seq_fp32, "seq:fp32");
case_test!(seq_bf16, "seq:bf16");
case_test!(mha_w_fp32, "mha_w:fp32");
case_test!(mha_w_bf16, "mha_w:bf16");
case_test!(mha_now_fp32, "mha_now:fp32");
case_test!(mha_now_bf16, "mha_now:bf16");
case_test!(mha_fast_fp32, "mha_fast:fp32");
case_test!(mha_fast_bf16, "mha_fast:bf16");
case_test!(enc_post_fp32, "enc_post:fp32");
case_test!(enc_post_bf16, "enc_post:bf16");
case_test!(enc_pre_fp32, "enc_pre:fp32");
case_test!(enc_pre_bf16, "enc_pre:bf16");
case_test!(enc_fast_fp32, "enc_fast:fp32");
case_test!(enc_fast_bf16, "enc_fast:bf16");
case_test!(enc_fast_pre_fp32, "enc_fast_pre:fp32");
case_test!(enc_fast_pre_bf16, "enc_fast_pre:bf16");

// attention: every allocation of the MultiheadAttention / TransformerEncoderLayer
// cases in the GPU's order (SDPA backends, fast paths, backward nodes)
trace_test!(trace_mha_w_fp32, "mha_w:fp32");
trace_test!(trace_mha_w_bf16, "mha_w:bf16");
trace_test!(trace_mha_now_fp32, "mha_now:fp32");
trace_test!(trace_mha_now_bf16, "mha_now:bf16");
trace_test!(trace_mha_fast_fp32, "mha_fast:fp32");
trace_test!(trace_mha_fast_bf16, "mha_fast:bf16");
trace_test!(trace_enc_post_fp32, "enc_post:fp32");
trace_test!(trace_enc_post_bf16, "enc_post:bf16");
trace_test!(trace_enc_pre_fp32, "enc_pre:fp32");
trace_test!(trace_enc_pre_bf16, "enc_pre:bf16");
trace_test!(trace_enc_fast_fp32, "enc_fast:fp32");
trace_test!(trace_enc_fast_bf16, "enc_fast:bf16");
trace_test!(trace_enc_fast_pre_fp32, "enc_fast_pre:fp32");
trace_test!(trace_enc_fast_pre_bf16, "enc_fast_pre:bf16");
