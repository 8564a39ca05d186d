//! `F.scaled_dot_product_attention` in real training steps on the H100: one
//! attention's forward and its backward node, cut from the allocator traces
//! of the Hugging Face workloads (`fixtures/estimate/traces.tgz`, sliced by
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

/// A `(B, H, S, D)` view of a `(B, S, H*D)` projection output (non-leaf).
fn proj_view(rt: &Runtime, b: i64, h: i64, s: i64, d: i64, dt: DType) -> Tensor {
    let w = rt.randn(&[b, s, h * d], dt, Device::Cuda).unwrap();
    w.requires_grad_(true).unwrap();
    let p = w.mul_scalar(1.0).unwrap();
    p.view(&[b, s, h, d]).unwrap().transpose(1, 2)
}

/// A contiguous `(B, H, S, D)` non-leaf tensor (the cache's `cat`, `repeat_kv`).
fn contiguous(rt: &Runtime, b: i64, h: i64, s: i64, d: i64, dt: DType) -> Tensor {
    let w = rt.randn(&[b, h, s, d], dt, Device::Cuda).unwrap();
    w.requires_grad_(true).unwrap();
    w.mul_scalar(1.0).unwrap()
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

#[test]
fn cudnn_causal_llama_bf16() {
    let rt = Runtime::default();
    let (b, h, s, d) = (4, 8, 512, 64);
    let dt = DType::BF16;
    check(
        &rt,
        Case {
            name: "llama_train_bf16_adamw",
            backend: SdpaBackend::Cudnn,
            q: proj_view(&rt, b, h, s, d, dt),
            k: contiguous(&rt, b, h, s, d, dt),
            v: contiguous(&rt, b, h, s, d, dt),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: false,
        },
    );
}

#[test]
fn cudnn_grouped_query_llama_bf16() {
    let rt = Runtime::default();
    let (b, h, hkv, s, d) = (4, 12, 4, 512, 64);
    let dt = DType::BF16;
    check(
        &rt,
        Case {
            name: "llama_gqa_train_bf16",
            backend: SdpaBackend::Cudnn,
            q: proj_view(&rt, b, h, s, d, dt),
            k: contiguous(&rt, b, hkv, s, d, dt),
            v: contiguous(&rt, b, hkv, s, d, dt),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: true,
        },
    );
}

#[test]
fn cudnn_boolean_mask_mistral_bf16() {
    let rt = Runtime::default();
    let (b, h, s, d) = (4, 8, 512, 64);
    let dt = DType::BF16;
    let m = rt.empty(&[s, s], DType::Bool, Device::Cuda).unwrap();
    let mask = m.expand(&[b, 1, s, s]).unwrap();
    check(
        &rt,
        Case {
            name: "mistral_train_bf16_sw",
            backend: SdpaBackend::Cudnn,
            q: proj_view(&rt, b, h, s, d, dt),
            k: contiguous(&rt, b, h, s, d, dt),
            v: contiguous(&rt, b, h, s, d, dt),
            mask: Some(mask),
            dropout_p: 0.0,
            is_causal: false,
            enable_gqa: false,
        },
    );
}

#[test]
fn efficient_causal_llama_fp32() {
    let rt = Runtime::default();
    let (b, h, s, d) = (4, 8, 512, 64);
    let dt = DType::F32;
    check(
        &rt,
        Case {
            name: "llama_train_fp32_adamw",
            backend: SdpaBackend::Efficient,
            q: proj_view(&rt, b, h, s, d, dt),
            k: contiguous(&rt, b, h, s, d, dt),
            v: contiguous(&rt, b, h, s, d, dt),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: false,
        },
    );
}

#[test]
fn efficient_dropout_bert_fp32() {
    let rt = Runtime::default();
    let (b, h, s, d) = (8, 8, 256, 64);
    let dt = DType::F32;
    check(
        &rt,
        Case {
            name: "bert_train_fp32",
            backend: SdpaBackend::Efficient,
            q: proj_view(&rt, b, h, s, d, dt),
            k: proj_view(&rt, b, h, s, d, dt),
            v: proj_view(&rt, b, h, s, d, dt),
            mask: None,
            dropout_p: 0.1,
            is_causal: false,
            enable_gqa: false,
        },
    );
}

#[test]
fn math_grouped_query_mistral_fp32() {
    let rt = Runtime::default();
    warm_up_cublas(&rt);
    let (b, h, hkv, s, d) = (2, 8, 2, 512, 64);
    let dt = DType::F32;
    check(
        &rt,
        Case {
            name: "mistral_train_fp32",
            backend: SdpaBackend::Math,
            q: proj_view(&rt, b, h, s, d, dt),
            k: contiguous(&rt, b, hkv, s, d, dt),
            v: contiguous(&rt, b, hkv, s, d, dt),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: true,
        },
    );
}

#[test]
fn efficient_unaligned_length_vit_fp32() {
    // S = 197: logsumexp padded to 224, dQ workspace of ceil(197/64) blocks
    let rt = Runtime::default();
    let (b, h, s, d) = (16, 6, 197, 64);
    let dt = DType::F32;
    check(
        &rt,
        Case {
            name: "vit_train_fp32",
            backend: SdpaBackend::Efficient,
            q: proj_view(&rt, b, h, s, d, dt),
            k: proj_view(&rt, b, h, s, d, dt),
            v: proj_view(&rt, b, h, s, d, dt),
            mask: None,
            dropout_p: 0.0,
            is_causal: false,
            enable_gqa: false,
        },
    );
}

/// Inference inputs: no gradient anywhere.
fn plain(rt: &Runtime, b: i64, h: i64, s: i64, d: i64, dt: DType, view: bool) -> Tensor {
    if view {
        let p = rt.randn(&[b, s, h * d], dt, Device::Cuda).unwrap();
        p.view(&[b, s, h, d]).unwrap().transpose(1, 2)
    } else {
        rt.randn(&[b, h, s, d], dt, Device::Cuda).unwrap()
    }
}

#[test]
fn cudnn_inference_llama_bf16() {
    let rt = Runtime::default();
    let (b, h, s, d) = (8, 8, 1024, 64);
    let dt = DType::BF16;
    check_inference(
        &rt,
        Case {
            name: "llama_infer_bf16",
            backend: SdpaBackend::Cudnn,
            q: plain(&rt, b, h, s, d, dt, true),
            k: plain(&rt, b, h, s, d, dt, false),
            v: plain(&rt, b, h, s, d, dt, false),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: false,
        },
    );
}

#[test]
fn efficient_inference_llama_fp32() {
    let rt = Runtime::default();
    let (b, h, s, d) = (2, 8, 512, 64);
    let dt = DType::F32;
    check_inference(
        &rt,
        Case {
            name: "llama_infer_fp32",
            backend: SdpaBackend::Efficient,
            q: plain(&rt, b, h, s, d, dt, true),
            k: plain(&rt, b, h, s, d, dt, false),
            v: plain(&rt, b, h, s, d, dt, false),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: false,
        },
    );
}

#[test]
fn math_inference_grouped_query_qwen3_fp32() {
    let rt = Runtime::default();
    warm_up_cublas(&rt);
    let (b, h, hkv, s, d) = (2, 8, 4, 512, 128);
    let dt = DType::F32;
    check_inference(
        &rt,
        Case {
            name: "qwen3_infer_fp32",
            backend: SdpaBackend::Math,
            q: plain(&rt, b, h, s, d, dt, true),
            k: plain(&rt, b, hkv, s, d, dt, false),
            v: plain(&rt, b, hkv, s, d, dt, false),
            mask: None,
            dropout_p: 0.0,
            is_causal: true,
            enable_gqa: true,
        },
    );
}

#[test]
fn cudnn_dropout_bert_bf16() {
    let rt = Runtime::default();
    let (b, h, s, d) = (8, 8, 256, 64);
    let dt = DType::BF16;
    check(
        &rt,
        Case {
            name: "bert_train_bf16_sgdm",
            backend: SdpaBackend::Cudnn,
            q: proj_view(&rt, b, h, s, d, dt),
            k: proj_view(&rt, b, h, s, d, dt),
            v: proj_view(&rt, b, h, s, d, dt),
            mask: None,
            dropout_p: 0.1,
            is_causal: false,
            enable_gqa: false,
        },
    );
}
