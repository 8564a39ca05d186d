//! `F.scaled_dot_product_attention` in real training steps on the H100: one
//! attention's forward and its backward node, cut from the allocator traces
//! of the Hugging Face workloads (`fixtures/estimate/traces.tar.xz`, sliced by
//! `tests/data/extract_sdpa_slices.py`), against the twin run on inputs of
//! the same shapes and layouts. Every `alloc` and `free_requested` must match
//! in order and size.
//!
//! Layouts as the models make them: the query is a `(B, H, S, D)` view of a
//! `(B, S, H*D)` projection (after RoPE it keeps that layout); keys and
//! values are either such views too (BERT) or contiguous `(B, H, S, D)`
//! tensors (the `DynamicCache`'s `torch.cat`, `repeat_kv`). The gradient
//! reaching the attention is the transpose of a contiguous `(B, S, H, D)`
//! tensor (the backward of `attn_output.transpose(1, 2).contiguous()`).

use vramscope_engine::{BackwardOptions, DType, Device, Runtime, SdpaArgs, SdpaBackend, Tensor};
use Attention::{Causal, Encoder, SlidingWindow};
use DType::{BF16, F32};
use Pass::{Infer, Train};
use SdpaBackend::{Cudnn, Efficient, Math};

type Events = Vec<(String, u64)>;

fn slices(name: &str) -> (Events, Events) {
    let file = format!(
        "{}/tests/data/sdpa_slices/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    let mut cur = &mut fwd;
    for l in text.lines() {
        match l {
            "# fwd" => cur = &mut fwd,
            "# bwd" => cur = &mut bwd,
            _ => {
                let (a, n) = l.split_once(' ').expect("action size");
                cur.push((a.to_string(), n.parse().expect("size")));
            }
        }
    }
    (fwd, bwd)
}

fn events(rt: &Runtime) -> Events {
    rt.trace()
        .into_iter()
        .filter(|e| matches!(e.action.as_str(), "alloc" | "free_requested"))
        .map(|e| (e.action.as_str().to_string(), e.size))
        .collect()
}

/// One `(B, H, S, D)` input of the attention: a view of a `(B, S, H*D)`
/// projection output (`view`), or a contiguous tensor (the cache's `cat`,
/// `repeat_kv`); in training a non-leaf, in inference a plain tensor.
fn input(rt: &Runtime, [b, h, s, d]: [i64; 4], dt: DType, view: bool, train: bool) -> Tensor {
    let sizes: &[i64] = if view { &[b, s, h * d] } else { &[b, h, s, d] };
    let w = rt.randn(sizes, dt, Device::Cuda).unwrap();
    let t = if train {
        w.requires_grad_(true).unwrap();
        w.mul_scalar(1.0).unwrap()
    } else {
        w
    };
    if view {
        t.view(&[b, s, h, d]).unwrap().transpose(1, 2)
    } else {
        t
    }
}

/// The cuBLAS handles of the Python and autograd threads exist already in a
/// training step (their workspaces were allocated by earlier matmuls).
fn warm_up_cublas(rt: &Runtime) {
    let a = rt.randn(&[8, 8], DType::F32, Device::Cuda).unwrap();
    a.requires_grad_(true).unwrap();
    let y = a.mm(&a).unwrap().sum().unwrap();
    y.backward().unwrap();
}

struct Case<'a> {
    name: &'a str,
    backend: SdpaBackend,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<Tensor>,
    dropout_p: f64,
    is_causal: bool,
    enable_gqa: bool,
}

/// Run the case's attention forward under `torch.no_grad()`; compare it.
fn check_inference(rt: &Runtime, c: Case<'_>) {
    let (gpu_fwd, gpu_bwd) = slices(c.name);
    assert!(gpu_bwd.is_empty());
    let args = SdpaArgs {
        attn_mask: c.mask.as_ref(),
        dropout_p: c.dropout_p,
        is_causal: c.is_causal,
        scale: None,
        enable_gqa: c.enable_gqa,
    };
    rt.no_grad(|| {
        assert_eq!(
            Tensor::sdpa_backend(&c.q, &c.k, &c.v, &args).unwrap(),
            c.backend,
            "{}",
            c.name
        );
        rt.record_memory_history(true);
        let out = Tensor::sdpa(&c.q, &c.k, &c.v, &args).unwrap();
        assert!(out.grad_fn().is_none());
        assert_eq!(events(rt), gpu_fwd, "{}: forward", c.name);
    });
}

/// Run the case's attention forward and backward; compare both slices.
fn check(rt: &Runtime, c: Case<'_>) {
    let (gpu_fwd, gpu_bwd) = slices(c.name);
    let Case {
        name,
        backend,
        q,
        k,
        v,
        mask,
        dropout_p,
        is_causal,
        enable_gqa,
    } = c;
    let args = SdpaArgs {
        attn_mask: mask.as_ref(),
        dropout_p,
        is_causal,
        scale: None,
        enable_gqa,
    };
    assert_eq!(
        Tensor::sdpa_backend(&q, &k, &v, &args).unwrap(),
        backend,
        "{name}"
    );
    let (b, h, s, d) = (q.size(0), q.size(1), q.size(2), v.size(3));
    rt.record_memory_history(true);
    let out = Tensor::sdpa(&q, &k, &v, &args).unwrap();
    let fwd = events(rt);
    assert_eq!(fwd, gpu_fwd, "{name}: forward");
    // the model's next op; then only the autograd graph keeps q, k, v, out
    let y = out.transpose(1, 2).mul_scalar(1.0).unwrap();
    drop((out, q, k, v, mask));
    let g = rt.randn(&[b, s, h, d], y.dtype(), Device::Cuda).unwrap();
    rt.record_memory_history(true);
    y.backward_with(Some(g), BackwardOptions::default())
        .unwrap();
    // the first event is MulBackward0's gradient: the attention's incoming one
    let bwd = events(rt);
    if std::env::var("SDPA_TRACE_DEBUG").is_ok() {
        eprintln!("twin bwd: {bwd:?}");
    }
    assert!(bwd.len() > gpu_bwd.len(), "{name}: backward too short");
    assert_eq!(
        bwd[0],
        (
            "alloc".to_string(),
            (b * s * h * d) as u64 * y.dtype().size()
        )
    );
    assert_eq!(&bwd[1..=gpu_bwd.len()], &gpu_bwd[..], "{name}: backward");
}

/// How the model calls SDPA, and so how its keys and values are laid out.
#[derive(Clone, Copy)]
enum Attention {
    /// A decoder: `is_causal`; keys and values contiguous.
    Causal,
    /// A decoder with a sliding window (Mistral): a boolean `(S, S)` mask
    /// expanded to `(B, 1, S, S)` instead of `is_causal`; keys and values
    /// contiguous.
    SlidingWindow,
    /// An encoder (BERT, ViT): keys and values are projection views like the
    /// query; no mask, not causal.
    Encoder { dropout_p: f64 },
}

/// Which pass of the workload the slice is from.
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    /// a training step: forward and backward
    Train,
    /// an inference forward, under `no_grad`
    Infer,
}

/// One attention of a recorded workload: the pass, the workload it was cut
/// from (`tests/data/sdpa_slices/{slice}.txt`), the backend SDPA must pick,
/// the dtype, `[batch, query heads, key/value heads (enable_gqa when they
/// differ), sequence, head size]`, the attention.
type Spec = (Pass, &'static str, SdpaBackend, DType, [i64; 5], Attention);

/// Build the inputs of `spec` in a fresh process as the model does (the
/// mask first, then q, k, v) and compare the twin with the GPU's slices.
fn run((pass, slice, backend, dt, shape, attention): Spec) {
    let rt = Runtime::default();
    if backend == SdpaBackend::Math {
        // its matmuls find the cuBLAS handles made
        warm_up_cublas(&rt);
    }
    let [b, h, hkv, s, d] = shape;
    let train = pass == Pass::Train;
    // the mask's base lives to the end, as a test's local
    let base = match attention {
        Attention::SlidingWindow => Some(rt.empty(&[s, s], DType::Bool, Device::Cuda).unwrap()),
        _ => None,
    };
    let mask = base.as_ref().map(|m| m.expand(&[b, 1, s, s]).unwrap());
    let kv_view = matches!(attention, Attention::Encoder { .. });
    let case = Case {
        name: slice,
        backend,
        q: input(&rt, [b, h, s, d], dt, true, train),
        k: input(&rt, [b, hkv, s, d], dt, kv_view, train),
        v: input(&rt, [b, hkv, s, d], dt, kv_view, train),
        mask,
        dropout_p: match attention {
            Attention::Encoder { dropout_p } => dropout_p,
            _ => 0.0,
        },
        is_causal: matches!(attention, Attention::Causal),
        enable_gqa: hkv != h,
    };
    if train {
        check(&rt, case);
    } else {
        check_inference(&rt, case);
    }
    drop(base);
}

/// One `#[test]` per attention: `name: spec;`.
macro_rules! sdpa_tests {
    ($($name:ident: $spec:expr;)*) => {
        $(
            #[test]
            fn $name() {
                run($spec);
            }
        )*
    };
}

sdpa_tests! {
    cudnn_causal_llama_bf16:
        (Train, "llama_train_bf16_adamw", Cudnn, BF16, [4, 8, 8, 512, 64], Causal);
    cudnn_grouped_query_llama_bf16:
        (Train, "llama_gqa_train_bf16", Cudnn, BF16, [4, 12, 4, 512, 64], Causal);
    cudnn_boolean_mask_mistral_bf16:
        (Train, "mistral_train_bf16_sw", Cudnn, BF16, [4, 8, 8, 512, 64], SlidingWindow);
    efficient_causal_llama_fp32:
        (Train, "llama_train_fp32_adamw", Efficient, F32, [4, 8, 8, 512, 64], Causal);
    efficient_dropout_bert_fp32:
        (Train, "bert_train_fp32", Efficient, F32, [8, 8, 8, 256, 64], Encoder { dropout_p: 0.1 });
    math_grouped_query_mistral_fp32:
        (Train, "mistral_train_fp32", Math, F32, [2, 8, 2, 512, 64], Causal);
    // S = 197: logsumexp padded to 224, dQ workspace of ceil(197/64) blocks
    efficient_unaligned_length_vit_fp32:
        (Train, "vit_train_fp32", Efficient, F32, [16, 6, 6, 197, 64], Encoder { dropout_p: 0.0 });
    cudnn_inference_llama_bf16:
        (Infer, "llama_infer_bf16", Cudnn, BF16, [8, 8, 8, 1024, 64], Causal);
    efficient_inference_llama_fp32:
        (Infer, "llama_infer_fp32", Efficient, F32, [2, 8, 8, 512, 64], Causal);
    math_inference_grouped_query_qwen3_fp32:
        (Infer, "qwen3_infer_fp32", Math, F32, [2, 8, 4, 512, 128], Causal);
    cudnn_dropout_bert_bf16:
        (Train, "bert_train_bf16_sgdm", Cudnn, BF16, [8, 8, 8, 256, 64], Encoder { dropout_p: 0.1 });
}
