//! `F.scaled_dot_product_attention` as PyTorch 2.11 runs it on CUDA: the
//! backend choice of `sdp_utils.cpp` (`select_sdp_backend`) and, per backend,
//! exactly what the kernel allocates, what its autograd node saves and what
//! its backward allocates.
//!
//! Sources (`pytorch/pytorch`, read at a revision near 2.11; where 2.11
//! differs, the H100 traces of `fixtures/estimate/traces.tar.xz` and
//! `fixtures/ops/traces.tar.xz` decide, and the comment says so):
//! - `aten/src/ATen/native/transformers/attention.cpp`
//!   (`scaled_dot_product_attention`, `_scaled_dot_product_attention_math`,
//!   `convert_boolean_attn_mask`, `preprocess_mask`, `pad_last_dim`);
//! - `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp` and
//!   `sdp_utils_cpp.h` (the `check_*` filters and the priority order);
//! - `aten/src/ATen/native/transformers/cuda/attention.cu` /
//!   `attention_backward.cu` (the four kernels' forward and backward);
//! - `aten/src/ATen/native/cudnn/MHA.cpp` (`run_cudnn_SDP_fprop/bprop`,
//!   `alloc_with_matching_layout`, `permute_to_matching_layout`);
//! - `flash_attn/flash_api.cpp` (`mha_fwd`, `mha_bwd`) and
//!   `mem_eff_attention/kernel_backward.h` + `kernels/cutlassB.h`
//!   (the memory-efficient backward's workspace).
//!
//! Saved tensors follow the generated `Functions.h`: the saved inputs in
//! alphabetical order, then the saved outputs in alphabetical order; this is
//! the order `release_variables()` frees them (H100 traces: key, query,
//! value, logsumexp, output, philox_offset, philox_seed).

use std::cell::Cell;
use std::rc::Rc;

use crate::autograd::{Backward, Node, Pending};
use crate::dims::{broadcast_shapes, Dims};
use crate::dtype::{DType, Device};
use crate::error::{shape_err, EngineError, Result};
use crate::gpus::SdpaSupport;
use crate::ops::{empty_like, iter_output};
use crate::runtime::{Category, DeviceProfile, Runtime};
use crate::tensor::Tensor;

/// Which `F.scaled_dot_product_attention` kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdpaBackend {
    /// `_scaled_dot_product_flash_attention` (FlashAttention-2)
    Flash,
    /// `_scaled_dot_product_efficient_attention` (cutlass memory-efficient)
    Efficient,
    /// `_scaled_dot_product_cudnn_attention` (cuDNN fused attention)
    Cudnn,
    /// `_scaled_dot_product_attention_math` (explicit softmax(QK^T)V)
    Math,
}

/// The keyword arguments of `F.scaled_dot_product_attention(query, key,
/// value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
/// enable_gqa=False)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SdpaArgs<'a> {
    /// `attn_mask`: a boolean (True = take part) or float (added) mask
    /// broadcastable to `(..., L, S)`.
    pub attn_mask: Option<&'a Tensor>,
    /// `dropout_p`
    pub dropout_p: f64,
    /// `is_causal`
    pub is_causal: bool,
    /// `scale` (`None`: `1/sqrt(E)`)
    pub scale: Option<f64>,
    /// `enable_gqa`: key/value may have fewer heads than query.
    pub enable_gqa: bool,
}

const OP: &str = "scaled_dot_product_attention";

/// The cuDNN forward's workspace (`mha_graph->get_workspace_size()` in
/// `run_cudnn_SDP_fprop`), measured on the H200 (torch 2.11+cu130, cuDNN
/// 9.19), since cuDNN's plan is opaque. Several query positions: 256 bytes in
/// every traced configuration (training and inference, masks, dropout,
/// grouped-query attention, head dims 32..256). One query position (a decode
/// step): a split-KV plan when there is little parallelism, else nothing.
/// The keys can be split into `S` chunks, a power of two up to 64, while a
/// chunk (`ceil(s_kv / S)`) holds at least 128 keys; the plan splits when
/// four chunks hold more than 128 keys each (`s_kv > 512`) and `b × h_k`
/// (key/value heads over the batch) is at most half the SMs, halving `S` until `S × b × h_k` is below
/// twice the SMs. Its workspace is fp32 partial outputs `(b, h, S, d)` and
/// two fp32 statistics `(b, h, S)`, each rounded up to 128 bytes, and 128
/// bytes (`fixtures/run/sweeps/cudnn_decode_h200.jsonl`,
/// `cudnn_decode_splits_h200.jsonl` and blind19/s01; masks and dtypes make
/// no difference).
pub fn cudnn_fwd_workspace(shape: CudnnFwdShape, sm_count: u32) -> u64 {
    let CudnnFwdShape {
        b,
        h,
        h_k,
        s_q,
        s_kv,
        d,
    } = shape;
    if s_q != 1 {
        return 256;
    }
    let rows = (b * h_k).max(1) as u64;
    let keys = s_kv.max(0) as u64;
    let sms = u64::from(sm_count);
    let mut splits = 1u64;
    while splits < 64 && keys.div_ceil(splits * 2) >= 128 {
        splits *= 2;
    }
    // four chunks of more than 128 keys: blind116/dl05's H200 record took no
    // workspace for 512 keys (b 4, 12 heads, head dim 128; 282 decode steps)
    if splits < 4 || keys <= 512 || 2 * rows > sms {
        return 0;
    }
    while splits * rows >= 2 * sms {
        splits /= 2;
    }
    if splits < 2 {
        return 0;
    }
    let align = |n: u64| n.div_ceil(128) * 128;
    let parts = (b * h) as u64 * splits;
    align(parts * d as u64 * 4) + 2 * align(parts * 4) + 128
}

/// The shape [`cudnn_fwd_workspace`] reads: batch, query heads, key/value
/// heads, query and key lengths, head dim.
#[derive(Debug, Clone, Copy)]
pub struct CudnnFwdShape {
    /// batch
    pub b: i64,
    /// query heads
    pub h: i64,
    /// key/value heads
    pub h_k: i64,
    /// query positions
    pub s_q: i64,
    /// key positions
    pub s_kv: i64,
    /// head dim of the queries and keys
    pub d: i64,
}

/// The cuDNN backward's workspace (`run_cudnn_SDP_bprop`), measured on the
/// H100 (torch 2.11+cu130): an fp32 dQ accumulator `(b, h, s_q, d_qk)`, the
/// fp32 softmax-sum `(b, h, s_q)` and 256 bytes; with grouped-query
/// attention (fewer key/value heads) one more fp32 block of
/// `(b, h, s_kv, d_qk)` for the head-expanded dK/dV. Checked against
/// `mha_now:bf16` (540,928 B), `llama_train_bf16_adamw` (4,260,096 B),
/// `bert_train_bf16_sgdm` (dropout 0.1, 4,260,096 B), `mistral_train_bf16_sw`
/// (a mask, 4,260,096 B), `llama_gqa_train_bf16` (12,681,472 B) and
/// `gemma2_train_bf16` (4,227,328 B); at head dim 256,
/// `head_dim_256/gemma2_hd256_train_bf16_b2_s512` (grouped, 16,810,240 B) and
/// `head_dim_256/gemma2_hd256_train_fp32_autocast_sw256_b2_s512` (its masked layers,
/// whose key and value transformers repeats to every head: 8,421,632 B).
pub(crate) fn cudnn_bwd_workspace(b: i64, h: i64, h_k: i64, s_q: i64, s_kv: i64, d_qk: i64) -> u64 {
    let mut n = b * h * s_q * d_qk * 4 + b * h * s_q * 4 + 256;
    if h_k != h {
        n += b * h * s_kv * d_qk * 4;
    }
    n as u64
}

// ---- backend selection (sdp_utils.cpp, torch 2.11 on CUDA) --------------------------

/// `sdp::sdp_params`.
struct Params<'a> {
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    mask: Option<&'a Tensor>,
    dropout: f64,
    causal: bool,
    gqa: bool,
}

/// `check_tensor_shapes`: all three 4-D.
fn check_tensor_shapes(p: &Params<'_>) -> bool {
    p.q.dim() == 4 && p.k.dim() == 4 && p.v.dim() == 4
}

/// `check_all_tensors_on_device`.
fn check_on_cuda(p: &Params<'_>) -> bool {
    p.q.device() == Device::Cuda
}

/// `check_tensor_dtype(params, allowed)`: q, k, v of one allowed dtype.
fn check_dtype(p: &Params<'_>, allowed: &[DType]) -> bool {
    let d = p.q.dtype();
    d == p.k.dtype() && d == p.v.dtype() && allowed.contains(&d)
}

/// `check_for_attn_mask` (flash): no mask at all.
fn check_no_mask(p: &Params<'_>) -> bool {
    p.mask.is_none()
}

/// `check_attn_mask_shape` (cuDNN): a mask that does not require grad, of
/// shape `(L|1, S|1)` or `(B|1, H|1, L|1, S|1)`.
fn check_attn_mask_shape(p: &Params<'_>) -> bool {
    let Some(m) = p.mask else { return true };
    if m.requires_grad() || m.dim() < 2 {
        return false;
    }
    let (b, h, l, s) = (p.q.size(0), p.q.size(1), p.q.size(2), p.k.size(2));
    let (ml, ms) = (m.size(-2), m.size(-1));
    if (ml != l && ml != 1) || (ms != s && ms != 1) {
        return false;
    }
    match m.dim() {
        2 => true,
        4 => (m.size(0) == 1 || m.size(0) == b) && (m.size(1) == 1 || m.size(1) == h),
        _ => false,
    }
}

/// `check_head_dim_size_flash`: equal head dims, at most 256.
fn check_head_dim_size_flash(p: &Params<'_>) -> bool {
    let d = p.q.size(-1);
    d == p.k.size(-1) && d == p.v.size(-1) && d <= 256
}

/// `minimum_gemm_alignment` on sm >= 80: 8 elements for 16-bit types, 4 for fp32.
fn minimum_gemm_alignment(p: &Params<'_>) -> i64 {
    let half = matches!(p.q.dtype(), DType::F16 | DType::BF16);
    let bits = if half { 16 } else { 32 };
    4i64.max(128 / bits)
}

/// `check_head_dim_size_mem_efficient`: q and k head dims equal, q and v
/// head dims positive multiples of the gemm alignment.
fn check_head_dim_size_mem_efficient(p: &Params<'_>) -> bool {
    let a = minimum_gemm_alignment(p);
    let (dq, dk, dv) = (p.q.size(-1), p.k.size(-1), p.v.size(-1));
    dq == dk && dq % a == 0 && dq > 0 && dv % a == 0 && dv > 0
}

/// `check_data_ptr_alignment_mem_efficient` (sm >= 80): storage offsets
/// aligned to the gemm alignment (the allocator's bases are 512-aligned).
fn check_data_ptr_alignment_mem_efficient(p: &Params<'_>) -> bool {
    let bytes = minimum_gemm_alignment(p) * p.q.dtype().size() as i64;
    [p.q, p.k, p.v]
        .iter()
        .all(|t| t.numel() == 0 || (t.storage_offset() * t.dtype().size() as i64) % bytes == 0)
}

/// `check_flash_causal_non_square_seqlens`.
fn check_flash_causal_non_square_seqlens(p: &Params<'_>) -> bool {
    !p.causal || p.q.size(-2) == p.k.size(-2)
}

/// `check_nonzero_sequence_lengths_dense`.
fn check_nonzero_sequence_lengths(p: &Params<'_>) -> bool {
    p.q.size(-2) != 0 && p.k.size(-2) != 0
}

/// `check_last_dim_stride_equals_1_dense<ignore_singleton_dim>`: q, k, v
/// (and, on CUDA, the mask) with a unit last stride.
fn check_last_dim_stride_equals_1(p: &Params<'_>, ignore_singleton_dim: bool) -> bool {
    let mut qkv = p.q.stride_at(-1) == 1 && p.k.stride_at(-1) == 1 && p.v.stride_at(-1) == 1;
    if ignore_singleton_dim {
        qkv = qkv || p.q.size(-1) == 1;
    }
    let mask = p.mask.is_none_or(|m| m.stride_at(-1) == 1);
    qkv && mask
}

/// `check_batch_size_and_num_heads_dense<supports_gqa>`: one batch size;
/// with `enable_gqa` on a backend that supports it, key and value heads
/// equal and dividing the query heads, else all head counts equal.
fn check_batch_size_and_num_heads(p: &Params<'_>, supports_gqa: bool) -> bool {
    let (qb, kb, vb) = (p.q.size(0), p.k.size(0), p.v.size(0));
    if qb != kb || qb != vb {
        return false;
    }
    let (qh, kh, vh) = (p.q.size(-3), p.k.size(-3), p.v.size(-3));
    if p.gqa && supports_gqa {
        return kh == vh && kh > 0 && qh % kh == 0;
    }
    qh == kh && qh == vh
}

/// `check_cudnn_tensor_shapes` with the cuDNN of the 2.11+cu130 wheels
/// (9.19, at least 9.11): batch and heads at most 65535; head dims at most
/// 128, raised to 256 on sm 9.0 exactly ("Hopper: head_dim<=256 support
/// with cuDNN >= 9.10.0") and to 192 for (192, 128) on sm 10.x (cuDNN >=
/// 9.11); multiples of 8; no key/value sequence of length 1, no dropout
/// with a query of length 1. The H100 confirms the Hopper rule:
/// `presets_full_size_rest/gemma2_9b_infer_bf16_b1_s1024` (head dim 256) runs cuDNN's kernel
/// (two 8-byte philox tensors, the output, the 256-byte workspace).
fn check_cudnn_tensor_shapes(p: &Params<'_>, capability: (u32, u32), sdpa: &SdpaSupport) -> bool {
    const MAX: i64 = 65535;
    if p.q.size(0) > MAX || p.q.size(1) > MAX {
        return false;
    }
    let (s_q, s_k) = (p.q.size(2), p.k.size(2));
    let (d_qk, d_v) = (p.q.size(3), p.v.size(3));
    let limit = if sdpa.cudnn_hopper_head_dim {
        256
    } else if capability.0 == 10 && d_qk == 192 && d_v == 128 {
        192
    } else {
        128
    };
    if d_qk > limit || d_v > limit || d_qk % 8 != 0 || d_v % 8 != 0 {
        return false;
    }
    if s_k == 1 {
        return false;
    }
    !(p.dropout != 0.0 && s_q == 1)
}

/// `can_use_cudnn_attention`. Torch 2.11's cuDNN path accepts a dropout
/// probability that is not a multiple of 1/16: `bert_train_bf16_sgdm`
/// (attention dropout 0.1) runs cuDNN on the H100, so the newer
/// `check_cudnn_dropout` filter is not applied.
fn can_use_cudnn(p: &Params<'_>, capability: (u32, u32), sdpa: &SdpaSupport) -> bool {
    sdpa.cudnn
        && check_on_cuda(p)
        && check_tensor_shapes(p)
        && check_dtype(p, &[DType::F16, DType::BF16])
        && check_attn_mask_shape(p)
        && check_nonzero_sequence_lengths(p)
        && check_last_dim_stride_equals_1(p, true)
        && check_batch_size_and_num_heads(p, true)
        && check_cudnn_tensor_shapes(p, capability, sdpa)
}

/// `can_use_flash_attention`: sm80..sm121 ([`SdpaSupport::flash`]), and on
/// sm86..89 / sm120..121 no training with head dims in (192, 224], nor above
/// 224 with dropout.
fn can_use_flash(p: &Params<'_>, sdpa: &SdpaSupport) -> bool {
    sdpa.flash
        && check_head_dim_gt192_on_sm86_89(p, sdpa)
        && check_on_cuda(p)
        && check_tensor_shapes(p)
        && check_no_mask(p)
        && check_head_dim_size_flash(p)
        && check_flash_causal_non_square_seqlens(p)
        && check_dtype(p, &[DType::F16, DType::BF16])
        && check_batch_size_and_num_heads(p, true)
        && check_nonzero_sequence_lengths(p)
        && check_last_dim_stride_equals_1(p, true)
}

/// `can_use_mem_efficient_attention`. In torch 2.11 the memory-efficient
/// kernel does not take grouped-query inputs: `mistral_train_fp32`
/// (fp32, `enable_gqa=True`, 8 query / 2 key-value heads) runs the math
/// path on the H100.
fn can_use_efficient(p: &Params<'_>, sdpa: &SdpaSupport) -> bool {
    sdpa.efficient
        && check_on_cuda(p)
        && check_tensor_shapes(p)
        && check_head_dim_size_mem_efficient(p)
        && check_data_ptr_alignment_mem_efficient(p)
        && check_nonzero_sequence_lengths(p)
        && check_last_dim_stride_equals_1(p, false)
        && check_batch_size_and_num_heads(p, false)
        && if sdpa.bf16 {
            check_dtype(p, &[DType::F16, DType::F32, DType::BF16])
        } else {
            check_dtype(p, &[DType::F16, DType::F32])
        }
}

/// `check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120`.
fn check_head_dim_gt192_on_sm86_89(p: &Params<'_>, sdpa: &SdpaSupport) -> bool {
    if !sdpa.flash_head_dim_192_limit {
        return true;
    }
    let d = p.q.size(-1);
    let grad = p.q.requires_grad() || p.k.requires_grad() || p.v.requires_grad();
    let bad = (d > 192 && d <= 224) || (d > 224 && p.dropout > 0.0);
    !(grad && bad)
}

/// `select_sdp_backend`: the first backend of the priority order whose
/// filters all pass (math is always available).
fn select(rt: &Runtime, p: &Params<'_>) -> SdpaBackend {
    if p.q.device() != Device::Cuda {
        return SdpaBackend::Math;
    }
    // `check_prefer_cudnn_attention` ([`SdpaSupport::prefers_cudnn`]): the
    // 2.11+cu130 wheels qualify: every bf16 attention in the H100 traces is
    // cuDNN's (two 8-byte philox tensors, then the output, the logsumexp
    // and a 256-byte workspace)
    let profile = rt.profile();
    let (capability, sdpa) = (profile.capability, &profile.sdpa);
    let order: [SdpaBackend; 4] = if sdpa.prefers_cudnn {
        [
            SdpaBackend::Cudnn,
            SdpaBackend::Flash,
            SdpaBackend::Efficient,
            SdpaBackend::Math,
        ]
    } else {
        [
            SdpaBackend::Flash,
            SdpaBackend::Efficient,
            SdpaBackend::Math,
            SdpaBackend::Cudnn,
        ]
    };
    for b in order {
        let ok = match b {
            SdpaBackend::Cudnn => can_use_cudnn(p, capability, sdpa),
            SdpaBackend::Flash => can_use_flash(p, sdpa),
            SdpaBackend::Efficient => can_use_efficient(p, sdpa),
            SdpaBackend::Math => true,
        };
        if ok {
            return b;
        }
    }
    SdpaBackend::Math
}

/// `validate_sdpa_input`.
fn validate(q: &Tensor, k: &Tensor, v: &Tensor, a: &SdpaArgs<'_>) -> Result<()> {
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        return Err(EngineError::Mismatch {
            op: OP,
            detail: format!(
                "expected query, key, and value to have the same dtype, got {}, {} and {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        });
    }
    if q.device() != k.device() || q.device() != v.device() {
        return Err(EngineError::Mismatch {
            op: OP,
            detail: "expected query, key, and value to be on the same device".into(),
        });
    }
    if q.dim() < 2 || k.dim() < 2 || v.dim() < 2 {
        return Err(shape_err(
            OP,
            format!(
                "expected query, key and value to be at least 2-D, got {:?}, {:?}, {:?}",
                q.sizes(),
                k.sizes(),
                v.sizes()
            ),
        ));
    }
    if q.size(-1) != k.size(-1) {
        return Err(shape_err(
            OP,
            format!(
                "query {:?} and key {:?} head dims differ",
                q.sizes(),
                k.sizes()
            ),
        ));
    }
    if k.size(-2) != v.size(-2) {
        return Err(shape_err(
            OP,
            format!(
                "key {:?} and value {:?} lengths differ",
                k.sizes(),
                v.sizes()
            ),
        ));
    }
    if !(0.0..1.0).contains(&a.dropout_p) {
        return Err(EngineError::Mismatch {
            op: OP,
            detail: format!("dropout_p must be in [0, 1), got {}", a.dropout_p),
        });
    }
    if let Some(m) = a.attn_mask {
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(EngineError::Mismatch {
                op: OP,
                detail: format!(
                    "expected attn_mask dtype to be bool or to match query dtype, got {} and {}",
                    m.dtype(),
                    q.dtype()
                ),
            });
        }
        let target = [q.size(-2), k.size(-2)];
        let lead: Vec<i64> = q.sizes()[..q.dim() - 2].to_vec();
        let full: Vec<i64> = lead.iter().copied().chain(target).collect();
        match broadcast_shapes(&full, m.sizes()) {
            Some(s) if &*s == full.as_slice() => {}
            _ => {
                return Err(shape_err(
                    OP,
                    format!("attn_mask {:?} does not broadcast to {:?}", m.sizes(), full),
                ))
            }
        }
        if a.is_causal {
            return Err(EngineError::Mismatch {
                op: OP,
                detail: "explicit attn_mask should not be set when is_causal=True".into(),
            });
        }
    }
    if a.enable_gqa && q.dim() >= 3 {
        let (qh, kh, vh) = (q.size(-3), k.size(-3), v.size(-3));
        if !(qh == kh && kh == vh) && (kh == 0 || vh == 0 || qh % kh != 0 || qh % vh != 0) {
            return Err(shape_err(
                OP,
                format!(
                    "number of heads in key/value must divide those of query: {qh}, {kh}, {vh}"
                ),
            ));
        }
    } else if q.dim() >= 3 && (q.size(-3) != k.size(-3) || k.size(-3) != v.size(-3)) {
        // the math path's matmul broadcasts batch dims; a head mismatch
        // without enable_gqa is an error there too
        let (qh, kh) = (q.size(-3), k.size(-3));
        if kh != 1 && qh != 1 && qh != kh {
            return Err(shape_err(
                OP,
                format!(
                    "query {:?} and key {:?} head counts differ (pass enable_gqa=True)",
                    q.sizes(),
                    k.sizes()
                ),
            ));
        }
    }
    Ok(())
}

impl Tensor {
    /// `F.scaled_dot_product_attention(q, k, v, **args)`: picks the backend
    /// PyTorch 2.11 picks ([`Tensor::sdpa_backend`]) and runs it with that
    /// kernel's allocations and saved tensors.
    pub fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor, args: &SdpaArgs<'_>) -> Result<Tensor> {
        crate::autocast!(q.rt(), "scaled_dot_product_attention", [q, k, v, args.attn_mask] => |a| Tensor::sdpa(a.t(0), a.t(1), a.t(2), &SdpaArgs { attn_mask: a.opt(3), ..*args }));
        validate(q, k, v, args)?;
        let rt = q.rt().clone();
        rt.count_op();
        let backend = Tensor::sdpa_backend(q, k, v, args)?;
        rt.sdpa_backend_choice();
        // attention.cpp: a boolean mask becomes an additive one before the
        // kernel (convert_boolean_attn_mask{,_cudnn})
        let converted = match args.attn_mask {
            Some(m) if m.dtype() == DType::Bool => Some(convert_boolean_mask(m, q.dtype())?),
            Some(m) => Some(m.clone()),
            None => None,
        };
        let out = match backend {
            SdpaBackend::Cudnn => cudnn_forward(q, k, v, converted.as_ref(), args)?,
            SdpaBackend::Flash => flash_sdpa(q, k, v, args)?,
            SdpaBackend::Efficient => efficient_sdpa(q, k, v, converted, args)?,
            SdpaBackend::Math => math_forward(q, k, v, converted.as_ref(), args)?,
        };
        Ok(out)
    }

    /// The backend [`Tensor::sdpa`] would run for these inputs
    /// (`torch._fused_sdp_choice`), in the current grad mode.
    pub fn sdpa_backend(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        args: &SdpaArgs<'_>,
    ) -> Result<SdpaBackend> {
        validate(q, k, v, args)?;
        let p = Params {
            q,
            k,
            v,
            mask: args.attn_mask,
            dropout: args.dropout_p,
            causal: args.is_causal,
            gqa: args.enable_gqa,
        };
        Ok(select(q.rt(), &p))
    }

    /// `F.scaled_dot_product_attention(q, k, v, dropout_p=, is_causal=)`:
    /// [`Tensor::sdpa`] with no mask, the default scale and no GQA.
    pub fn scaled_dot_product_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        dropout_p: f64,
        is_causal: bool,
    ) -> Result<Tensor> {
        Tensor::sdpa(
            q,
            k,
            v,
            &SdpaArgs {
                dropout_p,
                is_causal,
                ..SdpaArgs::default()
            },
        )
    }

    pub(crate) fn stride_at(&self, d: i64) -> i64 {
        self.strides()[self.wrap_dim(d)]
    }

    pub(crate) fn storage_offset(&self) -> i64 {
        self.0.offset
    }
}

// ---- shared pieces ------------------------------------------------------------------

/// A fresh (non-view) tensor over `base`'s storage with other geometry: what
/// a kernel returns when it hands out a transposed view of its own buffer.
fn fresh(base: &Tensor, sizes: &[i64], strides: &[i64]) -> Tensor {
    Tensor::from_parts(
        base.0.storage.clone(),
        Dims::new(sizes),
        Dims::new(strides),
        base.0.offset,
        base.dtype(),
        base.device(),
        Rc::new(Cell::new(0)),
        false,
    )
}

fn swap12(s: &[i64]) -> Vec<i64> {
    let mut v = s.to_vec();
    v.swap(1, 2);
    v
}

/// `convert_boolean_attn_mask` / `_cudnn` (attention.cpp, 2.11): `where(mask,
/// 0, -inf)` with both values as 0-dim tensors on the mask's device, in the
/// query's dtype. The H100 traces show exactly that: two element-size
/// scalars, the converted mask, the scalars freed (last first) — no
/// `logical_not` temporary.
fn convert_boolean_mask(m: &Tensor, dtype: DType) -> Result<Tensor> {
    let rt = m.rt().clone();
    let op = "convert_boolean_attn_mask";
    let zero = rt.empty_op(&[], dtype, m.device(), op, Category::Temporary)?;
    let neg_inf = rt.empty_op(&[], dtype, m.device(), op, Category::Temporary)?;
    let out = iter_output("where", &[m, &zero, &neg_inf], dtype, Category::Temporary)?;
    drop(neg_inf);
    drop(zero);
    Ok(out)
}

/// `alloc_with_matching_layout(q, o, shape)` (MHA.cpp): the output's
/// strides follow the query's stride order (a stable argsort of the
/// strides). For a non-dense query (a chunk of a packed projection) this is
/// not `empty_like`: `mha_fast:bf16` shows the output in the query's
/// `(B, T, H, D)` order, so the head transpose after it needs no copy.
fn alloc_with_matching_layout(q: &Tensor, shape: &[i64], op: &'static str) -> Result<Tensor> {
    let mut order: Vec<usize> = (0..shape.len()).collect();
    let qs = q.strides();
    order.sort_by_key(|&i| qs[i]);
    let mut strides = vec![0i64; shape.len()];
    let mut cur = 1i64;
    for &d in &order {
        strides[d] = cur;
        cur *= shape[d];
    }
    q.rt()
        .empty_strided_op(shape, &strides, q.dtype(), q.device(), op, Category::Output)
}

/// The slots of a fused kernel's saved tensors, in `release_variables`
/// order: inputs alphabetically (attn_bias, key, query, value), then
/// outputs alphabetically (logsumexp, output, philox_offset, philox_seed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FusedSlots {
    pub(crate) attn_bias: Option<usize>,
    pub(crate) key: usize,
    pub(crate) query: usize,
    pub(crate) value: usize,
    pub(crate) logsumexp: usize,
    pub(crate) output: usize,
    pub(crate) philox_offset: Option<usize>,
    pub(crate) philox_seed: Option<usize>,
}

/// Which fused kernel an autograd node belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FusedKernel {
    Cudnn,
    Flash,
    Efficient,
}

/// `ScaledDotProduct{Cudnn,Flash,Efficient}AttentionBackward0`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FusedAttention {
    pub(crate) kernel: FusedKernel,
    pub(crate) slots: FusedSlots,
    pub(crate) dropout_p: f64,
    pub(crate) is_causal: bool,
    pub(crate) scale: Option<f64>,
}

impl FusedAttention {
    pub(crate) fn name(&self) -> &'static str {
        match self.kernel {
            FusedKernel::Cudnn => "ScaledDotProductCudnnAttentionBackward0",
            FusedKernel::Flash => "ScaledDotProductFlashAttentionBackward0",
            FusedKernel::Efficient => "ScaledDotProductEfficientAttentionBackward0",
        }
    }
}

/// Save q, k, v (and the bias) as the generated code does, before the kernel.
fn save_inputs(
    p: &mut Pending,
    bias: Option<&Tensor>,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> (Option<usize>, usize, usize, usize) {
    let b = bias.map(|b| p.save(b));
    let ks = p.save(k);
    let qs = p.save(q);
    let vs = p.save(v);
    (b, ks, qs, vs)
}

/// Finish a fused kernel's node as the generated code does after the
/// kernel: save the logsumexp, the output, then the philox offset and seed
/// where the kernel returns them (`(offset, seed)`), by the input slots
/// [`save_inputs`] gave.
fn save_outputs(
    p: Pending,
    kernel: FusedKernel,
    (attn_bias, key, query, value): (Option<usize>, usize, usize, usize),
    lse: &Tensor,
    out: &Tensor,
    philox: Option<(&Tensor, &Tensor)>,
    a: &SdpaArgs<'_>,
) {
    p.finish_saving(
        |p| {
            let logsumexp = p.save_output(lse);
            let output = p.save_output(out);
            let (philox_offset, philox_seed) = match philox {
                Some((offset, seed)) => (Some(p.save_output(offset)), Some(p.save_output(seed))),
                None => (None, None),
            };
            Backward::FusedAttention(FusedAttention {
                kernel,
                slots: FusedSlots {
                    attn_bias,
                    key,
                    query,
                    value,
                    logsumexp,
                    output,
                    philox_offset,
                    philox_seed,
                },
                dropout_p: a.dropout_p,
                is_causal: a.is_causal,
                scale: a.scale,
            })
        },
        &[out],
    );
}

/// A fused kernel's saved query, key, value and output, unpacked in that
/// order (as its backward's generated code does).
fn unpack_qkvo(node: &Node, s: &FusedSlots) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let q = node.saved(s.query)?;
    let k = node.saved(s.key)?;
    let v = node.saved(s.value)?;
    let o = node.saved(s.output)?;
    Ok((q, k, v, o))
}

// ---- cuDNN ----------------------------------------------------------------------------

/// `_scaled_dot_product_cudnn_attention_cuda` → `_cudnn_attention_forward`:
/// the philox seed and offset (`at::empty({}, kLong)` on the GPU, always),
/// then `run_cudnn_SDP_fprop`: the output in the query's layout, the fp32
/// logsumexp `(b, h, s_q)` when a gradient is needed, and the plan's
/// workspace for the launch.
fn cudnn_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    a: &SdpaArgs<'_>,
) -> Result<Tensor> {
    let rt = q.rt().clone();
    let op = "_cudnn_attention_forward";
    let mut pending = Pending::begin(&rt, &[Some(q), Some(k), Some(v)]);
    let inputs = pending.as_mut().map(|p| save_inputs(p, mask, q, k, v));
    let compute_lse = pending.is_some();
    let seed = rt.empty_op(&[], DType::I64, Device::Cuda, op, Category::Output)?;
    let offset = rt.empty_op(&[], DType::I64, Device::Cuda, op, Category::Output)?;
    let (b, h, s_q) = (q.size(0), q.size(1), q.size(2));
    let d_v = v.size(3);
    let out = alloc_with_matching_layout(q, &[b, h, s_q, d_v], op)?;
    let lse = if compute_lse {
        Some(rt.empty_op(&[b, h, s_q], DType::F32, q.device(), op, Category::Output)?)
    } else {
        None
    };
    // the plan is built before its workspace is known: the engines load
    rt.cudnn_plan();
    let shape = CudnnFwdShape {
        b,
        h,
        h_k: k.size(1),
        s_q,
        s_kv: k.size(2),
        d: q.size(3),
    };
    let ws = rt.storage(
        cudnn_fwd_workspace(shape, rt.profile().sm_count),
        q.device(),
        op,
        Category::Workspace,
    )?;
    drop(ws);
    if let (Some(p), Some(inputs), Some(lse)) = (pending, inputs, lse.as_ref()) {
        let philox = Some((&offset, &seed));
        save_outputs(p, FusedKernel::Cudnn, inputs, lse, &out, philox, a);
    }
    // the op's result tuple dies in element order: logsumexp, seed, offset
    drop(lse);
    drop(seed);
    drop(offset);
    Ok(out)
}

/// `_scaled_dot_product_cudnn_attention_backward_cuda` →
/// `_cudnn_attention_backward`: `empty_like` gradients for q, k, v (in their
/// layouts), then `run_cudnn_SDP_bprop`: a grad_output copy in the output's
/// stride order only when its last stride is not 1 (cuDNN >= 9.5.1), and the
/// plan's workspace; the workspace dies first, then the copy.
fn cudnn_backward(node: &Node, a: &FusedAttention, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let s = a.slots;
    let (q, k, v, o) = unpack_qkvo(node, &s)?;
    // the philox seed/offset are unpacked (and version-checked) for the kernel
    let philox: Vec<Tensor> = [s.philox_seed, s.philox_offset]
        .into_iter()
        .flatten()
        .map(|i| node.saved(i))
        .collect::<Result<_>>()?;
    let op = "_cudnn_attention_backward";
    let dq = empty_like(&q, q.dtype(), op, Category::Gradient)?;
    let dk = empty_like(&k, k.dtype(), op, Category::Gradient)?;
    let dv = empty_like(&v, v.dtype(), op, Category::Gradient)?;
    let d_o = if grad.stride_at(-1) != 1 {
        Some(permute_to_matching_layout(&o, grad)?)
    } else {
        None
    };
    let ws = cudnn_bwd_workspace(
        q.size(0),
        q.size(1),
        k.size(1),
        q.size(2),
        k.size(2),
        q.size(3),
    );
    let rule = crate::ScratchRule::CudnnAttentionBackward {
        b: q.size(0),
        h: q.size(1),
        h_k: k.size(1),
        s_q: q.size(2),
        s_kv: k.size(2),
        d_qk: q.size(3),
    };
    let w = q.rt().scratch(ws, rule, op)?;
    drop(w);
    drop(d_o);
    drop(philox);
    Ok(finish_grads(node, [dq, dk, dv]))
}

/// `permute_to_matching_layout(o, dO)`: `dO.permute(outer_to_inner)
/// .contiguous().permute(inverse)`.
fn permute_to_matching_layout(o: &Tensor, g: &Tensor) -> Result<Tensor> {
    let n = o.dim();
    let mut order: Vec<usize> = (0..n).collect();
    let os = o.strides();
    order.sort_by(|&x, &y| os[y].cmp(&os[x]));
    let sizes: Vec<i64> = order.iter().map(|&d| g.sizes()[d]).collect();
    let c = g.rt().empty_op(
        &sizes,
        g.dtype(),
        g.device(),
        "contiguous",
        Category::Temporary,
    )?;
    let cs = c.strides().to_vec();
    let mut st = vec![0i64; n];
    for (i, &d) in order.iter().enumerate() {
        st[d] = cs[i];
    }
    Ok(fresh(&c, g.sizes(), &st))
}

/// The node's gradient outputs: only the ones an edge needs (the others die
/// with the op's result tuple at the end of `apply`).
fn finish_grads<const N: usize>(node: &Node, grads: [Tensor; N]) -> Vec<Option<Tensor>> {
    let mut out: Vec<Option<Tensor>> = vec![None; node.edges.len()];
    let mut unneeded = Vec::new();
    for (i, g) in grads.into_iter().enumerate() {
        if i < out.len() && node.needs(i) {
            out[i] = Some(g);
        } else {
            unneeded.push(g);
        }
    }
    drop(unneeded);
    out
}

// ---- FlashAttention-2 -------------------------------------------------------------------

/// `attention.cpp`, flash branch: `pad_last_dim<8>` (a `constant_pad_nd` when
/// the head dim is not a multiple of 8), `_scaled_dot_product_flash_attention`,
/// then the padded output narrowed back.
fn flash_sdpa(q: &Tensor, k: &Tensor, v: &Tensor, a: &SdpaArgs<'_>) -> Result<Tensor> {
    let d = q.size(-1);
    let pad = (8 - d % 8) % 8;
    if pad == 0 {
        return flash_forward(q, k, v, a);
    }
    let scale = Some(a.scale.unwrap_or(1.0 / (d as f64).sqrt()));
    let qp = q.constant_pad(&[0, pad])?;
    let kp = k.constant_pad(&[0, pad])?;
    let vp = v.constant_pad(&[0, pad])?;
    let args = SdpaArgs { scale, ..*a };
    let out = flash_forward(&qp, &kp, &vp, &args)?;
    drop((qp, kp, vp));
    Ok(out.narrow(-1, 0, d))
}

/// `mha_fwd`'s split-KV heuristic (`num_splits_heuristic`, 128 threads per
/// block, so twice the SM count).
fn flash_num_splits(profile: &DeviceProfile, b: i64, h: i64, s_q: i64, s_k: i64, d: i64) -> i64 {
    let block_n = if d <= 64 {
        256
    } else if d <= 128 {
        128
    } else {
        64
    };
    let num_n_blocks = (s_k + block_n - 1) / block_n;
    let num_m_blocks = (s_q + 63) / 64;
    let num_sms = 2 * profile.sm_count as i64;
    let bnm = b * h * num_m_blocks;
    if bnm as f64 >= 0.8 * num_sms as f64 {
        return 1;
    }
    let max_splits = 128.min(num_sms).min(num_n_blocks);
    let ceildiv = |x: i64, y: i64| (x + y - 1) / y;
    let eligible = |n: i64| n == 1 || ceildiv(num_n_blocks, n) != ceildiv(num_n_blocks, n - 1);
    let mut eff = Vec::new();
    let mut max_eff = 0f64;
    for n in 1..=max_splits {
        if !eligible(n) {
            eff.push(0f64);
            continue;
        }
        let waves = (bnm * n) as f64 / num_sms as f64;
        let e = waves / waves.ceil();
        max_eff = max_eff.max(e);
        eff.push(e);
    }
    for n in 1..=max_splits {
        if eligible(n) && eff[(n - 1) as usize] >= 0.85 * max_eff {
            return n;
        }
    }
    1
}

/// `_scaled_dot_product_flash_attention_cuda` → `_flash_attention_forward` →
/// `mha_fwd` on `(B, S, H, D)` views: the output `empty_like(q)`, the fp32
/// logsumexp `(b, h, s_q)`, the split-KV accumulators when the heuristic
/// splits (no dropout only), the `rng_state` (two uint64) and the 8-byte
/// `_unused` philox offset on the GPU (a fresh `rng_state` with dropout);
/// with GQA heads and one query row the heuristic sees `h_k` heads of
/// `h / h_k` rows (`seqlenq_ngroups_swapped`). Not exercised by the H100 traces (cuDNN wins every bf16 case there):
/// written from `flash_api.cpp`.
fn flash_forward(q: &Tensor, k: &Tensor, v: &Tensor, a: &SdpaArgs<'_>) -> Result<Tensor> {
    let rt = q.rt().clone();
    let op = "_flash_attention_forward";
    let mut pending = Pending::begin(&rt, &[Some(q), Some(k), Some(v)]);
    let inputs = pending.as_mut().map(|p| save_inputs(p, None, q, k, v));
    let qt = q.transpose(1, 2);
    let (b, s_q, h, d) = (qt.size(0), qt.size(1), qt.size(2), qt.size(3));
    let s_k = k.size(2);
    let out_t = empty_like(&qt, q.dtype(), op, Category::Output)?;
    drop(qt);
    let lse = rt.empty_op(&[b, h, s_q], DType::F32, q.device(), op, Category::Output)?;
    let d_rounded = if d <= 128 {
        (d + 31) / 32 * 32
    } else {
        (d + 63) / 64 * 64
    };
    let accum = if a.dropout_p == 0.0 {
        // `seqlenq_ngroups_swapped`: one query row with GQA heads is viewed as h / h_k rows of
        // h_k heads for the split-KV heuristic and its accumulators
        let h_k = k.size(1);
        let (h, s_q) = if s_q == 1 && h > h_k {
            (h_k, h / h_k)
        } else {
            (h, s_q)
        };
        let n = flash_num_splits(&rt.profile(), b, h, s_q, s_k, d);
        if n > 1 {
            let l = rt.empty_op(
                &[n, b, h, s_q],
                DType::F32,
                q.device(),
                op,
                Category::Temporary,
            )?;
            let o = rt.empty_op(
                &[n, b, h, s_q, d_rounded],
                DType::F32,
                q.device(),
                op,
                Category::Temporary,
            )?;
            Some((l, o))
        } else {
            None
        }
    } else {
        None
    };
    let mut rng_state = rt.empty_op(&[2], DType::I64, Device::Cuda, op, Category::Output)?;
    let unused = rt.empty_op(&[], DType::I64, Device::Cuda, op, Category::Output)?;
    if a.dropout_p > 0.0 {
        rng_state = rt.empty_op(&[2], DType::I64, Device::Cuda, op, Category::Output)?;
    }
    drop(accum);
    let out = fresh(&out_t, &swap12(out_t.sizes()), &swap12(out_t.strides()));
    drop(out_t);
    if let (Some(p), Some((_, key, query, value))) = (pending, inputs) {
        let philox = Some((&unused, &rng_state));
        save_outputs(
            p,
            FusedKernel::Flash,
            (None, key, query, value),
            &lse,
            &out,
            philox,
            a,
        );
    }
    drop(lse);
    drop(rng_state);
    drop(unused);
    Ok(out)
}

/// `_scaled_dot_product_flash_attention_backward_cuda` →
/// `_flash_attention_backward` → `mha_bwd` on `(B, S, H, D)` views:
/// contiguous copies of grad_out and out when needed, `empty_like` dq/dk/dv,
/// the fp32 `softmax_d (b, h, ceil128(s_q))` and `dq_accum (b, ceil128(s_q),
/// h, ceil32(d))`, head-expanded dK/dV for grouped-query attention (summed
/// into dk/dv); freed as the C++ scopes end: dV/dK expansions, dq_accum,
/// softmax_d, the out copy, the grad_out copy.
fn flash_backward(node: &Node, a: &FusedAttention, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let s = a.slots;
    let (q, k, v, o) = unpack_qkvo(node, &s)?;
    let rt = q.rt().clone();
    let op = "_flash_attention_backward";
    let go_t = grad.transpose(1, 2);
    let go_c = go_t.contiguous_untracked(op)?;
    drop(go_t);
    let o_t = o.transpose(1, 2);
    let o_c = o_t.contiguous_untracked(op)?;
    let (qt, kt, vt) = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
    let (b, s_q, h, d) = (qt.size(0), qt.size(1), qt.size(2), qt.size(3));
    let (s_k, h_k) = (kt.size(1), kt.size(2));
    let dq = empty_like(&qt, q.dtype(), op, Category::Gradient)?;
    let dk = empty_like(&kt, k.dtype(), op, Category::Gradient)?;
    let dv = empty_like(&vt, v.dtype(), op, Category::Gradient)?;
    let s_q_r = (s_q + 127) / 128 * 128;
    let d_r = if d <= 128 {
        (d + 31) / 32 * 32
    } else {
        (d + 63) / 64 * 64
    };
    let softmax_d = rt.empty_op(
        &[b, h, s_q_r],
        DType::F32,
        q.device(),
        op,
        Category::Temporary,
    )?;
    let dq_accum = rt.empty_op(
        &[b, s_q_r, h, d_r],
        DType::F32,
        q.device(),
        op,
        Category::Workspace,
    )?;
    let expanded = if h_k != h {
        let ek = rt.empty_op(
            &[b, s_k, h, d],
            q.dtype(),
            q.device(),
            op,
            Category::Temporary,
        )?;
        let ev = rt.empty_op(
            &[b, s_k, h, d],
            q.dtype(),
            q.device(),
            op,
            Category::Temporary,
        )?;
        // at::sum_out(dk, reshape(dk_expanded, {b, s_k, h_k, h / h_k, d}), {3})
        for e in [&ek, &ev] {
            let r = e.view(&[b, s_k, h_k, h / h_k, d])?;
            reduction_scratch(&r, &[false, false, false, true, false], "sum")?;
        }
        Some((ek, ev))
    } else {
        None
    };
    if let Some((ek, ev)) = expanded {
        drop(ev);
        drop(ek);
    }
    drop(dq_accum);
    drop(softmax_d);
    drop(o_c);
    drop(o_t);
    drop(go_c);
    // `grad.transpose(1, 2)` below autograd: a plain alias, not a view
    let back = |t: Tensor| fresh(&t, &swap12(t.sizes()), &swap12(t.strides()));
    Ok(finish_grads(node, [back(dq), back(dk), back(dv)]))
}

/// The scratch a CUDA reduction of `t` over `reduced` allocates and frees
/// (`gpu_reduce_kernel`'s staging buffer and semaphores), if any.
fn reduction_scratch(t: &Tensor, reduced: &[bool], op: &'static str) -> Result<()> {
    if t.device() != Device::Cuda || t.numel() == 0 {
        return Ok(());
    }
    let rt = t.rt().clone();
    crate::ops::reduce::alloc_reduce_scratch(&rt, t, reduced, t.dtype().acc_type(), op)
}

impl Tensor {
    /// `t.contiguous()` inside a kernel (no autograd): `self` when already
    /// contiguous, else a contiguous copy.
    fn contiguous_untracked(&self, op: &'static str) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            self.rt().empty_op(
                self.sizes(),
                self.dtype(),
                self.device(),
                op,
                Category::Temporary,
            )
        }
    }
}

// ---- memory-efficient (cutlass) ---------------------------------------------------------

/// `preprocess_mask` (attention.cpp): a mask whose strides are not all
/// multiples of 8 (or whose last stride is not 1) is padded to a multiple
/// of 8 on its last dim (`pad_bias`: `constant_pad_nd`, then a slice), then
/// expanded to `(B, H, L, S)`.
fn preprocess_mask(m: &Tensor, q: &Tensor, k: &Tensor) -> Result<Tensor> {
    let aligned = m.strides()[..m.dim() - 1].iter().all(|s| s % 8 == 0) && m.stride_at(-1) == 1;
    let base = if aligned {
        m.clone()
    } else {
        let last = m.size(-1);
        let pad = 8 - last % 8;
        let padded = m.constant_pad(&[0, pad])?;
        padded.narrow(-1, 0, last)
    };
    base.expand(&[q.size(0), q.size(1), q.size(2), k.size(2)])
}

/// `_scaled_dot_product_efficient_attention_cuda` →
/// `_efficient_attention_forward` on `(B, M, H, K)` views: the output
/// `(B, M, H, Kv)` contiguous, the fp32 logsumexp `(B, H, ceil32(M))` when a
/// gradient is needed (0 elements, no memory, otherwise), and for 16-bit
/// types with a value head dim above 128 (the `32x128_gmem` kernel) an fp32
/// output accumulator for the launch. Philox seed and offset are CPU
/// scalars (no GPU memory outside graph capture).
///
/// `attn_mask.value() = preprocess_mask(...)` replaces the (converted)
/// mask: a padded bias is all the kernel keeps, the converted mask dying
/// before it runs (`scaled_dot_product_attention`, attention.cpp).
fn efficient_sdpa(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<Tensor>,
    a: &SdpaArgs<'_>,
) -> Result<Tensor> {
    let bias = match mask {
        Some(m) => Some(preprocess_mask(&m, q, k)?),
        None => None,
    };
    let out = efficient_forward(q, k, v, bias.as_ref(), a)?;
    drop(bias);
    Ok(out)
}

fn efficient_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
    a: &SdpaArgs<'_>,
) -> Result<Tensor> {
    let rt = q.rt().clone();
    let op = "_efficient_attention_forward";
    let mut pending = Pending::begin(&rt, &[Some(q), Some(k), Some(v), bias]);
    let inputs = pending.as_mut().map(|p| save_inputs(p, bias, q, k, v));
    let (b, h, m) = (q.size(0), q.size(1), q.size(2));
    let (kd, kv) = (q.size(3), v.size(3));
    let res = rt.empty_op(&[b, m, h, kv], q.dtype(), q.device(), op, Category::Output)?;
    let lse_len = if pending.is_some() {
        (m + 31) / 32 * 32
    } else {
        0
    };
    let lse = rt.empty_op(
        &[b, h, lse_len],
        DType::F32,
        q.device(),
        op,
        Category::Output,
    )?;
    let half = matches!(q.dtype(), DType::F16 | DType::BF16);
    if half && kd.max(kv) > 128 {
        let acc = rt.empty_op(
            &[b, m, h, kv],
            DType::F32,
            q.device(),
            op,
            Category::Temporary,
        )?;
        drop(acc);
    }
    let out = fresh(&res, &swap12(res.sizes()), &swap12(res.strides()));
    drop(res);
    if let (Some(p), Some(inputs)) = (pending, inputs) {
        save_outputs(p, FusedKernel::Efficient, inputs, &lse, &out, None, a);
    }
    drop(lse);
    Ok(out)
}

/// A cutlass backward kernel of `cutlassB.h` (sm80 kernels, used on sm90):
/// block sizes and the largest head dim it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CutlassBKernel {
    pub(crate) block_i: i64,
    pub(crate) block_j: i64,
    pub(crate) max_k: i64,
}

/// `dispatch_cutlassB_{f32,bf16,f16}_sm80`: the first kernel (in file
/// order) whose `kMaxK` covers `max(K, Kv)`. With dropout the first
/// dropout kernel wins instead, but the dropout list repeats the same block
/// shapes in the same order, so the shape is the same. The sequence-aligned
/// variants share their block sizes with the next entry; the shared-memory
/// check passes for all of them on an H100 (227 KiB).
pub(crate) fn cutlass_b_kernel(dtype: DType, max_k: i64) -> CutlassBKernel {
    let k = |i, j, m| CutlassBKernel {
        block_i: i,
        block_j: j,
        max_k: m,
    };
    let list: [CutlassBKernel; 6] = if dtype == DType::F32 {
        [
            k(64, 64, 32),
            k(64, 64, 64),
            k(128, 64, 128),
            k(64, 64, 128),
            k(128, 64, 65536),
            k(64, 64, 65536),
        ]
    } else {
        [
            k(64, 64, 32),
            k(64, 64, 64),
            k(128, 128, 128),
            k(64, 64, 128),
            k(128, 64, 65536),
            k(64, 64, 65536),
        ]
    };
    list.into_iter()
        .find(|kk| kk.max_k >= max_k)
        .unwrap_or(list[5])
}

/// The problem a memory-efficient backward launch sees, on `(B, M, H, K)`
/// views: batch, heads, query and key lengths, q/k and v head dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EffProblem {
    pub(crate) b: i64,
    pub(crate) h: i64,
    pub(crate) m: i64,
    pub(crate) n: i64,
    pub(crate) k: i64,
    pub(crate) kv: i64,
}

/// `AttentionBackwardKernel::Params::workspace_size()` (kernel_backward.h)
/// with the split-keys heuristic of `_efficient_attention_backward`:
/// per (batch, head), `align4(gK + gV + gQ)` floats, where the dQ staging
/// area is `ceil(M / I) * ceil(K / J)` blocks of `I * J` floats plus a
/// 16-byte lock (`GradQTempStorage`), and dK/dV accumulators exist only for
/// 16-bit types whose head dim exceeds `I` (`kOutputInRF` false):
/// `num_splits_key * J * align(K, I)` each. Checked on the H100:
/// `mha_now:fp32` (B=4, H=8, M=128, K=32: 1,049,600 B),
/// `llama_train_fp32_adamw` (B=4, H=8, M=512, K=64: 4,198,400 B) and
/// `vit_train_fp32` (B=16, H=6, M=197, K=64: 6,297,600 B).
pub(crate) fn efficient_bwd_workspace(dtype: DType, p: EffProblem) -> u64 {
    let EffProblem { b, h, m, n, k, kv } = p;
    let kern = cutlass_b_kernel(dtype, k.max(kv));
    let half = dtype != DType::F32;
    let output_in_rf = half && kern.max_k <= kern.block_i;
    let needs_accum_kv = !output_in_rf && half;
    let ceil = |x: i64, y: i64| (x + y - 1) / y;
    let align = |x: i64, y: i64| ceil(x, y) * y;
    // split keys: ceil(N / J), 1 when the grid is already large and N small,
    // capped at 200 / (B * H) when dK/dV need accumulators
    let mut splits = ceil(n, kern.block_j);
    if b * h >= 256 && n <= 2 * kern.block_j {
        splits = 1;
    }
    if needs_accum_kv {
        splits = splits.min(200 / (b * h).max(1));
    }
    let splits = splits.max(1);
    let gk = if needs_accum_kv {
        splits * kern.block_j * align(k, kern.block_i)
    } else {
        0
    };
    let gv = if needs_accum_kv {
        splits * kern.block_j * align(kv, kern.block_i)
    } else {
        0
    };
    let gq = ceil(m, kern.block_i) * ceil(k, kern.block_j) * (kern.block_i * kern.block_j + 4);
    let stride_bh = align(gk + gv + gq, 4);
    (b * h * stride_bh * 4) as u64
}

/// `_scaled_dot_product_efficient_attention_backward_cuda` →
/// `_efficient_attention_backward` on `(B, M, H, K)` views:
/// `grad_out.contiguous()`, contiguous grad_q/k/v `at::empty(sizes)`, the
/// bias gradient (last dim aligned to 16) when the mask requires grad;
/// `delta` — for fp32 `(grad_out * out).sum(-1).transpose(-2, -1)
/// .contiguous()` (mul, sum, copy; the mul and sum die at the end of the
/// statement, sum first), for 16-bit types an fp32 `(B, H, M)` the kernel
/// fills — then the workspace; freed in scope order: delta, workspace,
/// the grad_out copy.
fn efficient_backward(
    node: &Node,
    a: &FusedAttention,
    grad: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let s = a.slots;
    let (q, k, v, o) = unpack_qkvo(node, &s)?;
    let bias = match s.attn_bias {
        Some(b) => Some(node.saved(b)?),
        None => None,
    };
    let rt = q.rt().clone();
    let op = "_efficient_attention_backward";
    let go_t = grad.transpose(1, 2);
    let go = go_t.contiguous_untracked(op)?;
    let (qt, kt, vt) = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
    let (b, m, h, kd) = (qt.size(0), qt.size(1), qt.size(2), qt.size(3));
    let (n, kv) = (kt.size(1), vt.size(3));
    let gq = rt.empty_op(qt.sizes(), q.dtype(), q.device(), op, Category::Gradient)?;
    let gk = rt.empty_op(kt.sizes(), k.dtype(), k.device(), op, Category::Gradient)?;
    let gv = rt.empty_op(vt.sizes(), v.dtype(), v.device(), op, Category::Gradient)?;
    let bias_requires_grad = node.needs(3);
    let gb = match (&bias, bias_requires_grad) {
        (Some(bb), true) => {
            let mut sz = bb.sizes().to_vec();
            let last = *sz.last().unwrap_or(&0);
            if let Some(l) = sz.last_mut() {
                *l = (last + 15) / 16 * 16;
            }
            let t = rt.empty_op(&sz, bb.dtype(), bb.device(), op, Category::Gradient)?;
            // `.slice(-1, 0, last)` below autograd: a plain alias
            Some(fresh(&t, bb.sizes(), t.strides()))
        }
        _ => None,
    };
    let half = q.dtype() != DType::F32;
    let delta = if half {
        rt.empty_op(&[b, h, m], DType::F32, q.device(), op, Category::Temporary)?
    } else {
        // (grad_out.to(kFloat) * out.to(kFloat)).sum(-1).transpose(-2, -1).contiguous()
        let prod = rt.empty_op(
            &[b, m, h, kv],
            DType::F32,
            q.device(),
            "mul",
            Category::Temporary,
        )?;
        let summed = rt.empty_op(
            &[b, m, h],
            DType::F32,
            q.device(),
            "sum",
            Category::Temporary,
        )?;
        reduction_scratch(&prod, &[false, false, false, true], "sum")?;
        let delta = rt.empty_op(
            &[b, h, m],
            DType::F32,
            q.device(),
            "contiguous",
            Category::Temporary,
        )?;
        drop(summed);
        drop(prod);
        delta
    };
    let ws = efficient_bwd_workspace(
        q.dtype(),
        EffProblem {
            b,
            h,
            m,
            n,
            k: kd,
            kv,
        },
    );
    let w = if ws > 0 {
        let rule = crate::ScratchRule::EfficientAttentionBackward {
            dtype: q.dtype(),
            dims: [b, h, m, n, kd, kv],
        };
        Some(rt.scratch(ws, rule, op)?)
    } else {
        None
    };
    drop(delta);
    drop(w);
    drop(go);
    drop(go_t);
    drop(o);
    // `grad.transpose(1, 2)` below autograd: a plain alias, not a view
    let back = |t: Tensor| fresh(&t, &swap12(t.sizes()), &swap12(t.strides()));
    let mut out = finish_grads(node, [back(gq), back(gk), back(gv)]);
    if let (Some(g), true) = (gb, out.len() > 3 && node.needs(3)) {
        out[3] = Some(g);
    }
    Ok(out)
}

/// A fused attention node's backward (called from `Node::apply`).
pub(crate) fn fused_backward(
    node: &Node,
    a: &FusedAttention,
    grad: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    match a.kernel {
        FusedKernel::Cudnn => cudnn_backward(node, a, grad),
        FusedKernel::Flash => flash_backward(node, a, grad),
        FusedKernel::Efficient => efficient_backward(node, a, grad),
    }
}

// ---- math (composite) ---------------------------------------------------------------------

/// `pre_process_group_query_attention_input`: with `enable_gqa` and fewer
/// key/value heads, `repeat_interleave(n_rep, dim=-3)` =
/// `unsqueeze(-2).expand(...).clone(contiguous).flatten(-4, -3)`.
fn repeat_interleave_heads(t: &Tensor, reps: i64) -> Result<Tensor> {
    let d = t.dim() as i64 - 3;
    let u = t.unsqueeze(d + 1)?;
    let mut shape = u.sizes().to_vec();
    shape[(d + 1) as usize] = reps;
    let e = u.expand(&shape)?;
    drop(u);
    let c = e.clone_contiguous()?;
    drop(e);
    let mut flat: Vec<i64> = t.sizes().to_vec();
    flat[d as usize] *= reps;
    c.view(&flat)
}

/// `at::_safe_softmax(attn, -1)`: the softmax (its node saves the result),
/// then — outside autograd — `attn == -inf` (bool like the input), its
/// `all(-1, keepdim)` and a 0-dim zero on the GPU to blank fully masked
/// rows in place; the three die in reverse order. `mistral_train_fp32`
/// shows exactly these four allocations after the 16 MiB softmax.
fn safe_softmax(attn: &Tensor) -> Result<Tensor> {
    let out = attn.softmax(-1)?;
    let rt = attn.rt().clone();
    let masked = iter_output("eq", &[attn], DType::Bool, Category::Temporary)?;
    let mut rows = masked.sizes().to_vec();
    if let Some(l) = rows.last_mut() {
        *l = 1;
    }
    let masked_rows = rt.empty_op(
        &rows,
        DType::Bool,
        attn.device(),
        "all",
        Category::Temporary,
    )?;
    let mut red = vec![false; masked.dim()];
    if let Some(l) = red.last_mut() {
        *l = true;
    }
    reduction_scratch(&masked, &red, "all")?;
    let zero = rt.empty_op(
        &[],
        out.dtype(),
        attn.device(),
        "scalar_tensor",
        Category::Temporary,
    )?;
    drop(zero);
    drop(masked_rows);
    drop(masked);
    Ok(out)
}

/// `_scaled_dot_product_attention_math`, op by op with its own autograd
/// nodes: `q * sqrt(scale)`; with `is_causal` a `tril` of `ones(L, S)`
/// converted to an additive mask; the GQA head repeat; `matmul(q,
/// k^T * sqrt(scale))`; `add_(mask)`; `_safe_softmax`; `dropout`; `matmul(attn,
/// v)`. The C++ locals die when it returns, last declared first: the
/// repeated key (and value, unless saved), the scaled query, the mask.
fn math_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    a: &SdpaArgs<'_>,
) -> Result<Tensor> {
    let rt = q.rt().clone();
    let e = q.size(-1) as f64;
    let scale = a.scale.unwrap_or(1.0 / e.sqrt());
    let neg = scale < 0.0;
    let sf = scale.abs().sqrt();
    let query = q.mul_scalar(if neg { -sf } else { sf })?;
    let mut attn_mask = mask.cloned();
    if a.is_causal {
        let (l, s) = (query.size(-2), k.size(-2));
        let ones = rt.empty_op(
            &[l, s],
            DType::Bool,
            q.device(),
            "ones",
            Category::Temporary,
        )?;
        let tril = rt.empty_op(
            &[l, s],
            DType::Bool,
            q.device(),
            "tril",
            Category::Temporary,
        )?;
        drop(ones);
        let converted = convert_boolean_mask(&tril, q.dtype())?;
        attn_mask = Some(converted);
        drop(tril);
    }
    let (kx, vx) =
        if a.enable_gqa && q.dim() >= 3 && (q.size(-3) != k.size(-3) || q.size(-3) != v.size(-3)) {
            let kr = q.size(-3) / k.size(-3);
            let vr = q.size(-3) / v.size(-3);
            (
                repeat_interleave_heads(k, kr)?,
                repeat_interleave_heads(v, vr)?,
            )
        } else {
            (k.clone(), v.clone())
        };
    let attn = {
        let kt = kx.transpose(-2, -1);
        let kts = kt.mul_scalar(sf)?;
        drop(kt);
        let r = query.matmul(&kts)?;
        drop(kts);
        r
    };
    if let Some(m) = &attn_mask {
        attn.add_(m, 1.0)?;
    }
    let attn = {
        let s = safe_softmax(&attn)?;
        drop(attn);
        s
    };
    let attn = if a.dropout_p > 0.0 {
        let d = attn.dropout(a.dropout_p, true)?;
        drop(attn);
        d
    } else {
        attn
    };
    let out = attn.matmul(&vx)?;
    // locals die in reverse declaration order (the repeated key and value,
    // the scaled query, the mask); the `(out, attn)` tuple's attn goes last,
    // when the caller keeps only `out` (qwen3_infer_fp32 on the H100)
    drop(kx);
    drop(vx);
    drop(query);
    drop(attn_mask);
    drop(attn);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BackwardOptions, Runtime};

    const B: i64 = 4;
    const H: i64 = 8;
    const S: i64 = 512;
    const D: i64 = 64;

    /// The H200's decode workspaces (fixtures/run/sweeps/cudnn_decode*_h200.jsonl): split plans
    /// for little parallelism, none past half the SMs or under four 128-key blocks, 256 bytes for
    /// several query positions.
    #[test]
    fn cudnn_forward_workspace_matches_the_h200_sweeps() {
        let ws = |b, h, h_k, s_q, s_kv, d| {
            cudnn_fwd_workspace(
                CudnnFwdShape {
                    b,
                    h,
                    h_k,
                    s_q,
                    s_kv,
                    d,
                },
                132,
            )
        };
        assert_eq!(ws(1, 16, 16, 1, 513, 64), 17_024);
        assert_eq!(ws(8, 16, 4, 1, 513, 64), 135_296);
        assert_eq!(ws(8, 16, 4, 1, 2049, 64), 270_464);
        assert_eq!(ws(16, 32, 4, 1, 2049, 256), 2_113_664);
        assert_eq!(ws(1, 4, 1, 1, 640, 64), 4_480);
        assert_eq!(ws(3, 4, 1, 1, 640, 64), 12_928);
        assert_eq!(ws(66, 4, 1, 1, 640, 64), 139_648);
        assert_eq!(ws(1, 4, 1, 1, 16384, 64), 64 * 4 * (256 + 8) + 128);
        assert_eq!(ws(8, 16, 16, 1, 2049, 64), 0);
        assert_eq!(ws(80, 4, 1, 1, 4096, 64), 0);
        assert_eq!(ws(1, 4, 1, 1, 385, 64), 0);
        // blind19/s01's decode steps: four splits up to 1,016 keys, eight from 1,017
        assert_eq!(ws(1, 32, 8, 1, 1016, 64), 33_920);
        assert_eq!(ws(1, 32, 8, 1, 1017, 64), 67_712);
        assert_eq!(ws(1, 16, 16, 2, 513, 64), 256);
        assert_eq!(ws(8, 16, 4, 7, 513, 128), 256);
        // blind116/dl05's chunked-attention decode steps over 512 keys: none on the H200
        assert_eq!(ws(4, 12, 12, 1, 512, 128), 0);
        assert_eq!(ws(4, 12, 12, 1, 513, 128), 99_968);
    }

    /// (B, H, S, D) views of a contiguous (B, S, H*D) projection, as the
    /// HF models make them; `grad` makes them non-leaf outputs of a node.
    fn bshd(rt: &Runtime, h: i64, dt: DType, grad: bool) -> Tensor {
        let base = rt.randn(&[B, S, h * D], dt, Device::Cuda).unwrap();
        let base = if grad {
            base.requires_grad_(true).unwrap();
            base.mul_scalar(1.0).unwrap()
        } else {
            base
        };
        base.view(&[B, S, h, D]).unwrap().transpose(1, 2)
    }

    fn allocs(rt: &Runtime) -> Vec<(String, u64)> {
        rt.trace()
            .into_iter()
            .filter(|e| matches!(e.action.as_str(), "alloc" | "free_requested"))
            .map(|e| (e.action.as_str().to_string(), e.size))
            .collect()
    }

    fn a(n: u64) -> (String, u64) {
        ("alloc".into(), n)
    }
    fn f(n: u64) -> (String, u64) {
        ("free_requested".into(), n)
    }

    #[test]
    fn backend_choice_follows_sdp_utils_on_the_h100() {
        let rt = Runtime::default();
        let bf = bshd(&rt, H, DType::BF16, true);
        let fp = bshd(&rt, H, DType::F32, true);
        let causal = SdpaArgs {
            is_causal: true,
            ..SdpaArgs::default()
        };
        let pick =
            |q: &Tensor, k: &Tensor, a: &SdpaArgs<'_>| Tensor::sdpa_backend(q, k, k, a).unwrap();
        // bf16: cuDNN first (sm90, cuDNN > 9.15), dropout 0.1 included
        assert_eq!(pick(&bf, &bf, &causal), SdpaBackend::Cudnn);
        let drop = SdpaArgs {
            dropout_p: 0.1,
            ..SdpaArgs::default()
        };
        assert_eq!(pick(&bf, &bf, &drop), SdpaBackend::Cudnn);
        // fp32: the memory-efficient kernel
        assert_eq!(pick(&fp, &fp, &causal), SdpaBackend::Efficient);
        // fp32 with GQA: math (efficient takes no grouped heads in 2.11)
        let kv = bshd(&rt, 2, DType::F32, true);
        let gqa = SdpaArgs {
            enable_gqa: true,
            is_causal: true,
            ..SdpaArgs::default()
        };
        assert_eq!(pick(&fp, &kv, &gqa), SdpaBackend::Math);
        // bf16 GQA: cuDNN handles grouped heads
        let kvb = bshd(&rt, 2, DType::BF16, true);
        assert_eq!(pick(&bf, &kvb, &gqa), SdpaBackend::Cudnn);
        // head dim 256 bf16: cuDNN takes it on sm 9.0 (its limit is 256
        // there), with a mask too
        assert_eq!(
            head_dim_256_backends(&rt),
            (SdpaBackend::Cudnn, SdpaBackend::Cudnn)
        );
        // head dim 264: cuDNN and flash refuse (> 256), efficient takes it
        let q264 = bf16(&rt, &[2, 4, 64, 264]);
        assert_eq!(pick(&q264, &q264, &causal), SdpaBackend::Efficient);
        // on sm 8.0 cuDNN's limit is 128 and it comes last: flash takes head
        // dim 256, and efficient when there is a mask (flash refuses masks)
        assert_eq!(
            head_dim_256_backends(&sm80()),
            (SdpaBackend::Flash, SdpaBackend::Efficient)
        );
        // sm 10.0: cuDNN first, its limit 128 but for (192, 128); head dim
        // 256 goes to flash
        let b200 = on((10, 0));
        let q192 = bf16(&b200, &[2, 4, 64, 192]);
        let v128 = bf16(&b200, &[2, 4, 64, 128]);
        let sdpa_backend =
            |q: &Tensor, k: &Tensor, v: &Tensor| Tensor::sdpa_backend(q, k, v, &causal).unwrap();
        assert_eq!(sdpa_backend(&q192, &q192, &v128), SdpaBackend::Cudnn);
        assert_eq!(sdpa_backend(&q192, &q192, &q192), SdpaBackend::Flash);
        assert_eq!(head_dim_256_backends(&b200).0, SdpaBackend::Flash);
        // sm 12.0 and sm 10.1: cuDNN last; sm 9.0's 256 is for sm 9.0 alone
        for cap in [(12, 0), (10, 1)] {
            let rt = on(cap);
            let q = bf16(&rt, &[2, 4, 64, 64]);
            assert_eq!(pick(&q, &q, &causal), SdpaBackend::Flash, "{cap:?}");
        }
        // a 3-D mask fails check_attn_mask_shape (cuDNN) but not efficient
        let m3 = bf16(&rt, &[1, S, S]);
        let masked3 = SdpaArgs {
            attn_mask: Some(&m3),
            ..SdpaArgs::default()
        };
        assert_eq!(pick(&bf, &bf, &masked3), SdpaBackend::Efficient);
        // a head dim that is not a multiple of 8 (bf16): flash (padded)
        let q36 = bf16(&rt, &[2, 4, 64, 36]);
        assert_eq!(pick(&q36, &q36, &SdpaArgs::default()), SdpaBackend::Flash);
        // causal with L != S: flash refuses, cuDNN takes it
        let kl = bf16(&rt, &[2, 4, 128, 64]);
        let ql = bf16(&rt, &[2, 4, 64, 64]);
        assert_eq!(pick(&ql, &kl, &causal), SdpaBackend::Cudnn);
        // 3-D inputs: no fused kernel
        let q3 = bf16(&rt, &[8, 64, 32]);
        assert_eq!(pick(&q3, &q3, &SdpaArgs::default()), SdpaBackend::Math);
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let rt = Runtime::default();
        let q = rt.randn(&[2, 4, 8, 16], DType::F32, Device::Cuda).unwrap();
        let k = rt.randn(&[2, 4, 8, 32], DType::F32, Device::Cuda).unwrap();
        assert!(Tensor::sdpa(&q, &k, &k, &SdpaArgs::default()).is_err());
        let kb = bf16(&rt, &[2, 4, 8, 16]);
        assert!(Tensor::sdpa(&q, &kb, &kb, &SdpaArgs::default()).is_err());
        let m = rt.randn(&[3, 8], DType::F32, Device::Cuda).unwrap();
        let args = SdpaArgs {
            attn_mask: Some(&m),
            ..SdpaArgs::default()
        };
        assert!(Tensor::sdpa(&q, &q, &q, &args).is_err());
        let kv3 = rt.randn(&[2, 3, 8, 16], DType::F32, Device::Cuda).unwrap();
        let gqa = SdpaArgs {
            enable_gqa: true,
            ..SdpaArgs::default()
        };
        assert!(Tensor::sdpa(&q, &kv3, &kv3, &gqa).is_err());
        let bad_p = SdpaArgs {
            dropout_p: 1.0,
            ..SdpaArgs::default()
        };
        assert!(Tensor::sdpa(&q, &q, &q, &bad_p).is_err());
    }

    #[test]
    fn cudnn_forward_and_backward_allocations() {
        // MHA.cpp + attention.cu: seed, offset (8 B each), the output, the
        // fp32 logsumexp (b, h, s_q), the 256 B plan workspace; backward:
        // dq, dk, dv, the workspace (dQ accumulator + softmax sum + 256).
        let rt = Runtime::default();
        let q = bshd(&rt, H, DType::BF16, true);
        let k = bshd(&rt, H, DType::BF16, true);
        let v = bshd(&rt, H, DType::BF16, true);
        rt.record_memory_history(true);
        let causal = SdpaArgs {
            is_causal: true,
            ..SdpaArgs::default()
        };
        let o = Tensor::sdpa(&q, &k, &v, &causal).unwrap();
        let qkv = (B * S * H * D * 2) as u64;
        let lse = (B * H * S * 4) as u64;
        assert_eq!(
            allocs(&rt),
            vec![a(8), a(8), a(qkv), a(lse), a(256), f(256)]
        );
        let n = o.grad_fn().unwrap();
        assert_eq!(n.name(), "ScaledDotProductCudnnAttentionBackward0");
        // key, query, value, logsumexp, output, philox_offset, philox_seed
        assert_eq!(n.num_saved(), 7);
        assert_eq!(n.saved_bytes(), 4 * qkv + lse + 16);
        // the output has the query's (B, S, H, D) layout: no copy to transpose back
        assert!(o.transpose(1, 2).is_contiguous());
        let g = bf16(&rt, &[B, S, H, D]);
        let gt = g.transpose(1, 2);
        let before = allocs(&rt).len();
        o.backward_with(Some(gt), BackwardOptions::default())
            .unwrap();
        let ws = cudnn_bwd_workspace(B, H, H, S, S, D);
        assert_eq!(ws, 4_260_096, "llama_train_bf16_adamw");
        let bwd = allocs(&rt)[before..].to_vec();
        assert_eq!(&bwd[..5], &[a(qkv), a(qkv), a(qkv), a(ws), f(ws)]);
    }

    /// A bf16 CUDA tensor of `shape` on `rt`.
    fn bf16(rt: &Runtime, shape: &[i64]) -> Tensor {
        rt.randn(shape, DType::BF16, Device::Cuda).unwrap()
    }

    /// A runtime on a GPU of this compute capability (the H100's
    /// constants otherwise).
    fn on(capability: (u32, u32)) -> Runtime {
        Runtime::new(crate::runtime::RuntimeConfig {
            profile: DeviceProfile {
                capability,
                sdpa: SdpaSupport::of(capability),
                ..DeviceProfile::h100_torch_2_11()
            },
            ..Default::default()
        })
    }

    /// A runtime on an sm 8.0 GPU, where cuDNN comes last in the priority
    /// order: flash takes head dim 256.
    fn sm80() -> Runtime {
        on((8, 0))
    }

    /// The backends of a (2, 4, 64, 256) bf16 attention on `rt`: causal,
    /// and with a 2-D mask.
    fn head_dim_256_backends(rt: &Runtime) -> (SdpaBackend, SdpaBackend) {
        let q = bf16(rt, &[2, 4, 64, 256]);
        let m = bf16(rt, &[64, 64]);
        let causal = SdpaArgs {
            is_causal: true,
            ..SdpaArgs::default()
        };
        let masked = SdpaArgs {
            attn_mask: Some(&m),
            ..SdpaArgs::default()
        };
        (
            Tensor::sdpa_backend(&q, &q, &q, &causal).unwrap(),
            Tensor::sdpa_backend(&q, &q, &q, &masked).unwrap(),
        )
    }

    /// A leaf (B, H, L, D) tensor requiring grad, contiguous.
    fn leaf(rt: &Runtime, shape: &[i64], dt: DType) -> Tensor {
        let t = rt.randn(shape, dt, Device::Cuda).unwrap();
        t.requires_grad_(true).unwrap();
        t
    }

    #[test]
    fn workspace_formulas_match_the_h100() {
        let p = |b, h, m, k| EffProblem {
            b,
            h,
            m,
            n: m,
            k,
            kv: k,
        };
        // mem_eff kernel_backward.h workspace_size(), measured sizes
        assert_eq!(
            efficient_bwd_workspace(DType::F32, p(4, 8, 128, 32)),
            1_049_600
        );
        assert_eq!(
            efficient_bwd_workspace(DType::F32, p(4, 8, 512, 64)),
            4_198_400
        );
        assert_eq!(
            efficient_bwd_workspace(DType::F32, p(16, 6, 197, 64)),
            6_297_600
        );
        assert_eq!(
            efficient_bwd_workspace(DType::F32, p(8, 16, 512, 64)),
            16_793_600
        );
        // 16-bit, head dim 256 (128x64_k65536): dK/dV accumulators, split keys
        // capped at 200 / (B*H) = 12 -> min(ceil(512/64) = 8, 12) = 8 splits
        let half = efficient_bwd_workspace(DType::BF16, p(2, 8, 512, 256));
        let per_bh = 2 * 8 * 64 * 256 + 4 * 4 * (128 * 64 + 4);
        assert_eq!(half, (2 * 8 * per_bh * 4) as u64);
        // cuDNN backward: dQ accumulator + softmax sum + 256 (+ expanded dK/dV with GQA)
        assert_eq!(cudnn_bwd_workspace(4, 8, 8, 128, 128, 32), 540_928);
        assert_eq!(cudnn_bwd_workspace(4, 12, 4, 512, 512, 64), 12_681_472);
        assert_eq!(cudnn_bwd_workspace(2, 8, 4, 512, 512, 64), 4_227_328);
        // head dim 256 (the u6_ traces)
        assert_eq!(cudnn_bwd_workspace(2, 8, 4, 512, 512, 256), 16_810_240);
        assert_eq!(cudnn_bwd_workspace(2, 8, 8, 512, 512, 256), 8_421_632);
    }

    #[test]
    fn cutlass_backward_kernel_choice() {
        let k = |dt, d| cutlass_b_kernel(dt, d);
        assert_eq!(
            (k(DType::F32, 32).block_i, k(DType::F32, 32).max_k),
            (64, 32)
        );
        assert_eq!(k(DType::F32, 64).max_k, 64);
        assert_eq!(
            (k(DType::F32, 96).block_i, k(DType::F32, 96).max_k),
            (128, 128)
        );
        assert_eq!(k(DType::BF16, 128).block_j, 128);
        assert_eq!(k(DType::BF16, 160).max_k, 65536);
    }

    #[test]
    fn efficient_forward_saves_inputs_and_outputs_and_backward_allocates() {
        // _efficient_attention_forward: (B, M, H, Kv) output, fp32 logsumexp
        // (B, H, ceil32(M)); backward: three BMHK gradients, the fp32 delta
        // (mul, sum, transpose-copy), the workspace
        let rt = Runtime::default();
        let (b, h, m, d) = (2, 4, 100, 32);
        let q = leaf(&rt, &[b, h, m, d], DType::F32);
        let k = leaf(&rt, &[b, h, m, d], DType::F32);
        let v = leaf(&rt, &[b, h, m, d], DType::F32);
        rt.record_memory_history(true);
        let o = Tensor::sdpa(&q, &k, &v, &SdpaArgs::default()).unwrap();
        let t = (b * m * h * d * 4) as u64;
        let lse = (b * h * 128 * 4) as u64;
        assert_eq!(allocs(&rt), vec![a(t), a(lse)]);
        // the output is the (B, M, H, K) buffer seen as (B, H, M, K)
        assert!(o.transpose(1, 2).is_contiguous());
        let n = o.grad_fn().unwrap();
        assert_eq!(n.name(), "ScaledDotProductEfficientAttentionBackward0");
        assert_eq!(n.num_saved(), 5, "key, query, value, log_sumexp, output");
        rt.record_memory_history(true);
        let g = rt.randn(&[b, h, m, d], DType::F32, Device::Cuda).unwrap();
        o.backward_with(Some(g), BackwardOptions::default())
            .unwrap();
        let ws = efficient_bwd_workspace(
            DType::F32,
            EffProblem {
                b,
                h,
                m,
                n: m,
                k: d,
                kv: d,
            },
        );
        let (rows, delta) = ((b * m * h * 4) as u64, (b * h * m * 4) as u64);
        let ev = allocs(&rt);
        // randn(g); grad_out (B,M,H,K) copy of the (B,H,M,K) gradient; q/k/v grads;
        // mul, sum, delta; sum and mul die; workspace; delta, workspace, copy die
        let want = vec![
            a(t),
            a(t),
            a(t),
            a(t),
            a(t),
            a(t),
            a(rows),
            a(delta),
            f(rows),
            f(t),
            a(ws),
            f(delta),
            f(ws),
            f(t),
        ];
        assert_eq!(&ev[..want.len()], &want[..]);
        assert!(q.grad().is_some() && k.grad().is_some() && v.grad().is_some());
    }

    #[test]
    fn efficient_without_grad_has_no_logsumexp() {
        let rt = Runtime::default();
        let q = rt.randn(&[2, 4, 64, 32], DType::F32, Device::Cuda).unwrap();
        rt.record_memory_history(true);
        let o = Tensor::sdpa(&q, &q, &q, &SdpaArgs::default()).unwrap();
        assert!(o.grad_fn().is_none());
        assert_eq!(allocs(&rt), vec![a(2 * 64 * 4 * 32 * 4)]);
    }

    #[test]
    fn efficient_mask_is_padded_and_16bit_wide_heads_use_an_accumulator() {
        // bf16, head dim 256 and a float mask on sm 8.0: flash (mask)
        // refuses and cuDNN comes last. preprocess_mask pads a last dim of
        // 100 to 104 (constant_pad_nd, then a slice); the 32x128_gmem kernel
        // needs an fp32 output accumulator for the launch.
        let rt = sm80();
        let (b, h, l, s, d) = (1, 2, 64, 100, 256);
        let q = bf16(&rt, &[b, h, l, d]);
        let k = bf16(&rt, &[b, h, s, d]);
        let m = bf16(&rt, &[l, s]);
        let args = SdpaArgs {
            attn_mask: Some(&m),
            ..SdpaArgs::default()
        };
        assert_eq!(
            Tensor::sdpa_backend(&q, &k, &k, &args).unwrap(),
            SdpaBackend::Efficient
        );
        rt.record_memory_history(true);
        let o = Tensor::sdpa(&q, &k, &k, &args).unwrap();
        let out = (b * l * h * d * 2) as u64;
        let acc = (b * l * h * d * 4) as u64;
        assert_eq!(
            allocs(&rt),
            vec![
                a((l * 104 * 2) as u64),
                a(out),
                a(acc),
                f(acc),
                f((l * 104 * 2) as u64)
            ]
        );
        drop(o);
    }

    #[test]
    fn boolean_masks_become_additive_before_the_kernel() {
        // where(mask, 0, -inf): two 0-dim tensors of the query's dtype, the
        // converted mask (of the mask's broadcast shape), the scalars freed
        let rt = Runtime::default();
        let q = bshd(&rt, H, DType::BF16, false);
        let m = rt.empty(&[S, S], DType::Bool, Device::Cuda).unwrap();
        let mask = m.expand(&[B, 1, S, S]).unwrap();
        let args = SdpaArgs {
            attn_mask: Some(&mask),
            ..SdpaArgs::default()
        };
        rt.record_memory_history(true);
        let _o = rt.no_grad(|| Tensor::sdpa(&q, &q, &q, &args).unwrap());
        let conv = (B * S * S * 2) as u64;
        let ev = allocs(&rt);
        assert_eq!(&ev[..5], &[a(2), a(2), a(conv), f(2), f(2)]);
        // the converted mask is a temporary of the call (no node keeps it)
        assert_eq!(ev.last().unwrap(), &f(conv));
    }

    #[test]
    fn cudnn_output_follows_the_query_layout_even_when_not_dense() {
        // native MHA hands cuDNN chunks of a packed (B, T, 3E) projection:
        // the output is (B, H, T, D) in (B, T, H, D) order, not contiguous
        let rt = Runtime::default();
        let (b, t, h, d) = (2, 16, 4, 32);
        let packed = bf16(&rt, &[b, t, 3 * h * d]);
        let heads = |i: i64| {
            packed
                .narrow(-1, i * h * d, h * d)
                .view(&[b, t, h, d])
                .unwrap()
                .transpose(1, 2)
        };
        let (q, k, v) = (heads(0), heads(1), heads(2));
        assert!(!q.is_non_overlapping_and_dense());
        let o = rt.no_grad(|| Tensor::sdpa(&q, &k, &v, &SdpaArgs::default()).unwrap());
        assert_eq!(o.strides(), &[t * h * d, d, h * d, 1]);
        assert!(o.transpose(1, 2).is_contiguous());
    }

    #[test]
    fn flash_forward_and_backward_allocations() {
        // bf16 head dim 256 on sm 8.0: flash runs. mha_fwd: out
        // empty_like(q_t), lse (b, h, s_q), rng_state (2 x u64), _unused (u64);
        // mha_bwd: dq/dk/dv empty_like, softmax_d (b, h, ceil128(s_q)),
        // dq_accum (b, ceil128(s_q), h, d_rounded) fp32
        // (8 * 8 heads * 4 row blocks >= 0.8 * 264: no split-KV accumulators)
        let rt = sm80();
        let (b, h, l, d) = (8, 8, 200, 256);
        let q = leaf(&rt, &[b, h, l, d], DType::BF16);
        let causal = SdpaArgs {
            is_causal: true,
            ..SdpaArgs::default()
        };
        assert_eq!(
            Tensor::sdpa_backend(&q, &q, &q, &causal).unwrap(),
            SdpaBackend::Flash
        );
        rt.record_memory_history(true);
        let o = Tensor::sdpa(&q, &q, &q, &causal).unwrap();
        let t = (b * h * l * d * 2) as u64;
        let lse = (b * h * l * 4) as u64;
        assert_eq!(allocs(&rt), vec![a(t), a(lse), a(16), a(8)]);
        let n = o.grad_fn().unwrap();
        assert_eq!(n.name(), "ScaledDotProductFlashAttentionBackward0");
        // key, query, value (one tensor three times), logsumexp, output, offset, seed
        assert_eq!(n.num_saved(), 7);
        rt.record_memory_history(true);
        let g = bf16(&rt, &[b, h, l, d]);
        o.backward_with(Some(g), BackwardOptions::default())
            .unwrap();
        let s_r = 256;
        let softmax_d = (b * h * s_r * 4) as u64;
        let accum = (b * s_r * h * d * 4) as u64;
        let ev = allocs(&rt);
        // randn(g); contiguous (B, S, H, D) copies of grad_out and out; dq, dk, dv;
        // softmax_d; dq_accum; freed: dq_accum, softmax_d, out copy, grad copy
        let want = vec![
            a(t),
            a(t),
            a(t),
            a(t),
            a(t),
            a(t),
            a(softmax_d),
            a(accum),
            f(accum),
            f(softmax_d),
            f(t),
            f(t),
        ];
        assert_eq!(&ev[..want.len()], &want[..]);
    }

    #[test]
    fn flash_grouped_query_backward_expands_and_sums() {
        let rt = sm80();
        let (b, h, hk, l, d) = (1, 8, 2, 128, 256);
        let q = leaf(&rt, &[b, h, l, d], DType::BF16);
        let k = leaf(&rt, &[b, hk, l, d], DType::BF16);
        let args = SdpaArgs {
            enable_gqa: true,
            ..SdpaArgs::default()
        };
        let o = Tensor::sdpa(&q, &k, &k, &args).unwrap();
        rt.record_memory_history(true);
        o.sum().unwrap().backward().unwrap();
        let exp = (b * l * h * d * 2) as u64;
        let ev = allocs(&rt);
        let i = ev
            .iter()
            .position(|e| *e == a((b * 128 * h * d * 4) as u64))
            .unwrap();
        // after dq_accum: the head-expanded dK and dV, freed dV first
        assert_eq!(&ev[i + 1..i + 5], &[a(exp), a(exp), f(exp), f(exp)]);
        assert_eq!(k.grad().unwrap().sizes(), &[b, hk, l, d]);
    }

    #[test]
    fn flash_pads_a_head_dim_that_is_not_a_multiple_of_8() {
        // pad_last_dim<8>: constant_pad_nd of q, k, v to 40; the output is
        // narrowed back to 36
        let rt = Runtime::default();
        let (b, h, l) = (1, 2, 64);
        let q = bf16(&rt, &[b, h, l, 36]);
        rt.record_memory_history(true);
        let o = rt.no_grad(|| Tensor::sdpa(&q, &q, &q, &SdpaArgs::default()).unwrap());
        let p = (b * h * l * 40 * 2) as u64;
        let ev = allocs(&rt);
        assert_eq!(&ev[..4], &[a(p), a(p), a(p), a(p)]);
        assert_eq!(o.sizes(), &[b, h, l, 36]);
    }

    #[test]
    fn flash_splits_keys_for_small_inference_batches() {
        // num_splits_heuristic: 1*2*1 row-blocks on 264 slots, 16 key blocks
        // (sm 8.0, so that flash runs head dim 256; the H100's SM count)
        let profile = DeviceProfile::h100_torch_2_11();
        assert_eq!(flash_num_splits(&profile, 1, 2, 64, 4096, 64), 16);
        assert_eq!(flash_num_splits(&profile, 4, 8, 512, 512, 64), 1);
        let rt = sm80();
        let q = bf16(&rt, &[1, 2, 64, 256]);
        let k = bf16(&rt, &[1, 2, 4096, 256]);
        rt.record_memory_history(true);
        let _o = rt.no_grad(|| Tensor::sdpa(&q, &k, &k, &SdpaArgs::default()).unwrap());
        let n = flash_num_splits(&profile, 1, 2, 64, 4096, 256);
        assert!(n > 1);
        let ev = allocs(&rt);
        assert_eq!(ev[2], a((n * 2 * 64 * 4) as u64));
        assert_eq!(ev[3], a((n * 2 * 64 * 256 * 4) as u64));
    }

    #[test]
    fn math_path_is_the_explicit_composite() {
        // fp32 with GQA: q*sqrt(s), ones/tril -> additive causal mask, the
        // repeated k and v, k^T*sqrt(s), q's reshape copy, the scores, the
        // softmax (+ its masking temporaries), the output
        let rt = Runtime::default();
        let (b, h, hk, l, d) = (1, 4, 2, 32, 16);
        let q = leaf(&rt, &[b, h, l, d], DType::F32);
        let k = leaf(&rt, &[b, hk, l, d], DType::F32);
        let args = SdpaArgs {
            is_causal: true,
            enable_gqa: true,
            ..SdpaArgs::default()
        };
        let o = Tensor::sdpa(&q, &k, &k, &args).unwrap();
        let n = o.grad_fn().unwrap();
        assert_eq!(n.name(), "UnsafeViewBackward0");
        let bmm = n.next_functions()[0].clone().unwrap();
        assert_eq!(bmm.name(), "BmmBackward0");
        // attn @ v saves both operands: the softmax result and the repeated v
        assert_eq!(bmm.num_saved(), 2);
        assert_eq!(
            bmm.saved_bytes(),
            (b * h * l * l * 4 + b * h * l * d * 4) as u64
        );
        o.sum().unwrap().backward().unwrap();
        assert_eq!(k.grad().unwrap().sizes(), &[b, hk, l, d]);
    }
}
