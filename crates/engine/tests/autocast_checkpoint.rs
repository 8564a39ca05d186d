//! The autocast and activation-checkpointing twins against slices of the
//! H100 allocator traces in `fixtures/estimate/traces.tar.xz` (torch
//! 2.11.0+cu130, transformers 5.17.0; `validation/hf_cases.py`).
//!
//! Each slice is the sequence of `alloc` (`+bytes`) and `free_completed`
//! (`-bytes`) entries of one stretch of a trace, copied here with the
//! entry range it comes from; the twin runs the same ops, composed from
//! engine ops as the HF modeling code calls them.

use vramscope_alloc::TraceAction;
use vramscope_engine::checkpoint::checkpoint;
use vramscope_engine::{DType, Device, Runtime, Tensor};

/// Allocations (`+bytes`) and frees (`-bytes`) recorded since recording
/// (re)started.
fn events(rt: &Runtime) -> Vec<i64> {
    let t = rt.trace();
    rt.record_memory_history(false);
    rt.record_memory_history(true);
    t.iter()
        .filter_map(|e| match e.action {
            TraceAction::Alloc => Some(e.size as i64),
            TraceAction::FreeCompleted => Some(-(e.size as i64)),
            _ => None,
        })
        .collect()
}

fn param(rt: &Runtime, sizes: &[i64]) -> Tensor {
    let t = rt.randn(sizes, DType::F32, Device::Cuda).unwrap();
    t.requires_grad_(true).unwrap();
    t
}

/// `Conv1D.forward`: `torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)`.
fn conv1d(x: &Tensor, w: &Tensor, b: &Tensor) -> vramscope_engine::Result<Tensor> {
    let mut out: Vec<i64> = x.sizes()[..x.dim() - 1].to_vec();
    out.push(w.size(1));
    let x2 = x.view(&[-1, x.size(-1)])?;
    let y = Tensor::addmm(b, &x2, w)?;
    drop(x2);
    y.view(&out)
}

/// `NewGELUActivation`: `0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 /
/// math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))`, each
/// temporary dropped where CPython drops it.
fn gelu_new(x: &Tensor) -> vramscope_engine::Result<Tensor> {
    let half = x.mul_scalar(0.5)?;
    let p = x.pow_scalar(3.0)?;
    let t = p.mul_scalar(0.044715)?;
    drop(p);
    let s = x.add(&t)?;
    drop(t);
    let c = s.mul_scalar((2.0 / std::f64::consts::PI).sqrt())?;
    drop(s);
    let th = c.tanh()?;
    drop(c);
    let one = th.add_scalar(1.0)?;
    drop(th);
    let y = half.mul(&one)?;
    drop(half);
    drop(one);
    Ok(y)
}

/// `gpt2_train_autocast_ckpt.trace.json`, entries 144..=200: `ln_2` and the
/// MLP of the first `GPT2Block` in `forward0` (n_embd 512, batch 4, seq
/// 512), under bf16 autocast inside the block's checkpoint. It shows:
/// `layer_norm` runs in fp32 and its saved mean/rstd die at once (the
/// checkpoint's holders keep no storage); each `addmm` casts weight, input,
/// bias, right to left; the input copy dies after the op, the weight and
/// bias copies stay in the cache; `pow` casts its bf16 input to fp32 and
/// the copy dies; bf16 + fp32 promotes; dropout's mask dies.
const GPT2_LN2_MLP: &[i64] = &[
    4194304, 8192, 8192, -8192, -8192, 2097152, 2097152, 4096, 8388608, -2097152, 8388608,
    16777216, 16777216, -16777216, 16777216, -16777216, 16777216, -16777216, 16777216, -16777216,
    16777216, -16777216, 16777216, -16777216, 16777216, -8388608, -16777216, -8388608, 2097152,
    8388608, 1024, 2097152, -8388608, -16777216, 1048576, 2097152, -1048576, -2097152,
];

#[test]
fn gpt2_mlp_under_autocast_and_checkpoint_matches_the_h100_trace() {
    let rt = Runtime::default();
    let (e, i) = (512, 2048);
    let (ln_w, ln_b) = (param(&rt, &[e]), param(&rt, &[e]));
    let (fc_w, fc_b) = (param(&rt, &[e, i]), param(&rt, &[i]));
    let (pj_w, pj_b) = (param(&rt, &[i, e]), param(&rt, &[e]));
    let x0 = param(&rt, &[4, 512, e]);
    let residual = x0.mul_scalar(1.0).unwrap();
    // the cuBLAS and cuBLASLt workspaces of the main thread already exist
    // at this point of the trace (entries 110-111)
    rt.no_grad(|| Tensor::addmm(&fc_b, &fc_w.t(), &fc_w).unwrap());
    rt.record_memory_history(true);
    let out = rt
        .autocast(DType::BF16, || {
            let out = checkpoint(&rt, &[&residual], move |a: &[Tensor]| {
                let h = a[0].layer_norm(&[512], Some(&ln_w), Some(&ln_b))?;
                let fc = conv1d(&h, &fc_w, &fc_b)?;
                let act = gelu_new(&fc)?;
                drop(fc);
                let pj = conv1d(&act, &pj_w, &pj_b)?;
                drop(act);
                let y = pj.dropout(0.1, true)?;
                drop(pj);
                Ok(vec![y, h])
            })?;
            assert_eq!(events(&rt), GPT2_LN2_MLP);
            Ok(out)
        })
        .unwrap();
    // leaving autocast frees the weight and bias copies: nothing saved them
    let mut ev = events(&rt);
    ev.sort();
    assert_eq!(ev, vec![-2097152, -2097152, -4096, -1024]);
    drop(out);
}

/// `roberta_train_autocast.trace.json`, entries 386..=399: the MLM
/// decoder (`Linear(512, 50265)`) on the head's fp32 LayerNorm output and
/// `CrossEntropyLoss` on its bf16 logits (batch 8, seq 256), under bf16
/// autocast. `linear` casts bias, weight, input (right to left); the fp32
/// input dies when the program drops it (the bf16 copy is what `addmm`
/// saved); `cross_entropy_loss` has no CUDA autocast kernel, so its
/// `log_softmax(x, 1, x.dtype)` stays bf16 (the dtype is set) and its
/// `nll_loss` (fp32 policy) casts the bf16 log-probabilities to fp32.
const ROBERTA_DECODER_LOSS: &[i64] = &[
    100530, 51471360, 2097152, 205885440, -4194304, 205885440, 411770880, 4, 4,
];

#[test]
fn roberta_mlm_loss_under_autocast_matches_the_h100_trace() {
    let rt = Runtime::default();
    let (e, v) = (512, 50265);
    let (w, b) = (param(&rt, &[v, e]), param(&rt, &[v]));
    let x0 = param(&rt, &[8, 256, e]);
    let labels = rt.zeros(&[8, 256], DType::I64, Device::Cuda).unwrap();
    let x = x0.mul_scalar(1.0).unwrap();
    // the workspaces exist by then
    rt.no_grad(|| Tensor::addmm(&b, &x.view(&[-1, e]).unwrap(), &w.t()).unwrap());
    rt.record_memory_history(true);
    let loss = rt
        .autocast(DType::BF16, || {
            let logits = x.linear(&w, Some(&b))?;
            drop(x);
            let flat = logits.view(&[-1, v])?;
            let loss = flat.cross_entropy(&labels.view(&[-1])?)?;
            Ok(loss)
        })
        .unwrap();
    let ev = events(&rt);
    assert_eq!(&ev[..ROBERTA_DECODER_LOSS.len()], ROBERTA_DECODER_LOSS);
    // then the logits go with the output, and at the exit the unsaved bias copy
    assert_eq!(&ev[ROBERTA_DECODER_LOSS.len()..], &[-205885440, -100530]);
    assert_eq!(loss.dtype(), DType::F32);
}

/// `llama_train_autocast_adamw.trace.json`, entries 140..=149: the first
/// layer's `F.scaled_dot_product_attention(q, k, v, is_causal=True)` under
/// bf16 autocast (batch 4, 8 heads, seq 512, head_dim 64). Its inputs are
/// fp32 (the rotary embedding promoted q and k; the cache's `torch.cat`
/// promoted v), so the autocast kernel casts all three to bf16 (2 MiB each)
/// before the kernel's own allocations; the kernel's node saves the copies.
const LLAMA_SDPA: &[i64] = &[2097152, 2097152, 2097152, 8, 8, 2097152, 65536, 256, -256];

#[test]
fn llama_sdpa_under_autocast_matches_the_h100_trace() {
    let rt = Runtime::default();
    let p = param(&rt, &[4, 8, 512, 64]);
    let (q, k, v) = (
        p.mul_scalar(1.0).unwrap(),
        p.mul_scalar(1.0).unwrap(),
        p.mul_scalar(1.0).unwrap(),
    );
    rt.record_memory_history(true);
    let out = rt
        .autocast(DType::BF16, || {
            Tensor::sdpa(
                &q,
                &k,
                &v,
                &vramscope_engine::SdpaArgs {
                    is_causal: true,
                    ..Default::default()
                },
            )
        })
        .unwrap();
    assert_eq!(events(&rt), LLAMA_SDPA);
    assert_eq!(out.dtype(), DType::BF16);
    // the copies are saved: dropping the inputs frees only the fp32 tensors
    drop((q, k, v));
    assert_eq!(events(&rt), vec![-4194304, -4194304, -4194304]);
}
