//! `nn.MultiheadAttention` (`F.multi_head_attention_forward`) and
//! `nn.TransformerEncoderLayer`, op by op as PyTorch 2.11 runs them.

use crate::dtype::DType;
use crate::error::{EngineError, Result};
use crate::nn::{apply_one, parameter, Dropout, LayerNorm, Linear, Module};
use crate::ops::attention::{SdpaArgs, SdpaBackend};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first)`.
pub struct MultiheadAttention {
    /// `embed_dim`
    pub embed_dim: i64,
    /// `num_heads`
    pub num_heads: i64,
    /// attention dropout
    pub dropout: f64,
    /// `batch_first`
    pub batch_first: bool,
    /// `(3E, E)`
    pub in_proj_weight: Tensor,
    /// `(3E,)`
    pub in_proj_bias: Option<Tensor>,
    /// `out_proj` (`NonDynamicallyQuantizableLinear`)
    pub out_proj: Linear,
    /// `module.training`
    pub training: bool,
}

impl MultiheadAttention {
    /// A CPU-initialised module in training mode.
    pub fn new(
        rt: &Runtime,
        embed_dim: i64,
        num_heads: i64,
        dropout: f64,
        bias: bool,
        batch_first: bool,
    ) -> Result<Self> {
        Ok(MultiheadAttention {
            embed_dim,
            num_heads,
            dropout,
            batch_first,
            in_proj_weight: parameter(rt, &[3 * embed_dim, embed_dim], DType::F32)?,
            in_proj_bias: if bias {
                Some(parameter(rt, &[3 * embed_dim], DType::F32)?)
            } else {
                None
            },
            out_proj: Linear::new(rt, embed_dim, embed_dim, bias)?,
            training: true,
        })
    }

    /// `mha(x, x, x, need_weights=, average_attn_weights=True)` (self-attention,
    /// no masks): the output and, with `need_weights`, the head-averaged weights.
    pub fn self_attention(
        &self,
        x: &Tensor,
        need_weights: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let rt = x.runtime().clone();
        rt.in_module("MultiheadAttention", || {
            if let (true, Some(bias)) = (self.fast_path(x), self.in_proj_bias.as_ref()) {
                return native_multi_head_attention(
                    x,
                    self.embed_dim,
                    self.num_heads,
                    &self.in_proj_weight,
                    bias,
                    &self.out_proj.weight,
                    self.out_proj.bias.as_ref(),
                    need_weights,
                );
            }
            let query = if self.batch_first && x.dim() == 3 {
                x.transpose(1, 0)
            } else {
                x.clone()
            };
            let (out, w) = self.mha_forward(&query, need_weights)?;
            drop(query);
            if self.batch_first && x.dim() == 3 {
                let t = out.transpose(1, 0);
                drop(out);
                Ok((t, w))
            } else {
                Ok((out, w))
            }
        })
    }

    /// `MultiheadAttention.forward`'s `why_not_fast_path` checks (PyTorch
    /// 2.11, self-attention without masks): fast path enabled (default),
    /// batched input, an input projection bias of the input's dtype, eval
    /// mode, an even head count, `batch_first`, and no gradient to record
    /// (grad mode off, or nothing requires grad).
    fn fast_path(&self, x: &Tensor) -> bool {
        let rt = x.runtime();
        let grads = rt.is_grad_enabled()
            && (x.requires_grad() || self.parameters().iter().any(|p| p.requires_grad()));
        x.dim() == 3
            && self
                .in_proj_bias
                .as_ref()
                .is_some_and(|b| b.dtype() == x.dtype())
            && self.in_proj_weight.dtype() == x.dtype()
            && !self.training
            && self.num_heads % 2 == 0
            && self.batch_first
            && !grads
    }

    /// `F.multi_head_attention_forward` for `query is key is value`.
    fn mha_forward(&self, query: &Tensor, need_weights: bool) -> Result<(Tensor, Option<Tensor>)> {
        let (tgt_len, bsz, e) = (query.size(0), query.size(1), query.size(2));
        let h = self.num_heads;
        let hd = e / h;
        // _in_projection_packed: self-attention branch
        let (q, k, v) = {
            let proj = query.linear(&self.in_proj_weight, self.in_proj_bias.as_ref())?;
            let proj = {
                let a = proj.unflatten(-1, &[3, e])?;
                let b = a.unsqueeze(0)?;
                let c = b.transpose(0, -2);
                let d = c.squeeze_dim(-2);
                d.contiguous()?
            };
            (proj.select(0, 0), proj.select(0, 1), proj.select(0, 2))
        };
        // Python rebinds names (`q = q.view(...)`); assignment drops the old
        // value right after the new one exists, as CPython does
        let (mut q, mut k, mut v) = (q, k, v);
        q = q.view(&[tgt_len, bsz * h, hd])?.transpose(0, 1);
        k = k.view(&[k.size(0), bsz * h, hd])?.transpose(0, 1);
        v = v.view(&[v.size(0), bsz * h, hd])?.transpose(0, 1);
        let src_len = k.size(1);
        let dropout_p = if self.training { self.dropout } else { 0.0 };
        if need_weights {
            let q_scaled = q.mul_scalar((1.0 / hd as f64).sqrt())?;
            let kt = k.transpose(-2, -1);
            let mut w = q_scaled.bmm(&kt)?;
            drop(kt);
            w = w.softmax(-1)?;
            if dropout_p > 0.0 {
                w = w.dropout(dropout_p, true)?;
            }
            let mut ao = w.bmm(&v)?;
            ao = {
                let t = ao.transpose(0, 1);
                let c = t.contiguous()?;
                drop(t);
                c.view(&[tgt_len * bsz, e])?
            };
            ao = ao.linear(&self.out_proj.weight, self.out_proj.bias.as_ref())?;
            ao = ao.view(&[tgt_len, bsz, e])?;
            w = w.view(&[bsz, h, tgt_len, src_len])?;
            w = w.mean_dims(&[1], false)?;
            Ok((ao, Some(w)))
        } else {
            q = q.view(&[bsz, h, tgt_len, hd])?;
            k = k.view(&[bsz, h, src_len, hd])?;
            v = v.view(&[bsz, h, src_len, hd])?;
            let mut ao = Tensor::scaled_dot_product_attention(&q, &k, &v, dropout_p, false)?;
            ao = {
                let p = ao.permute(&[2, 0, 1, 3]);
                let c = p.contiguous()?;
                drop(p);
                c.view(&[bsz * tgt_len, e])?
            };
            ao = ao.linear(&self.out_proj.weight, self.out_proj.bias.as_ref())?;
            ao = ao.view(&[tgt_len, bsz, e])?;
            Ok((ao, None))
        }
    }
}

impl Module for MultiheadAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.self_attention(x, false)?.0)
    }
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = vec![self.in_proj_weight.clone()];
        v.extend(self.in_proj_bias.clone());
        v.extend(self.out_proj.parameters());
        v
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.out_proj.apply_params(f)?;
        apply_one(&mut self.in_proj_weight, f)?;
        if let Some(b) = &mut self.in_proj_bias {
            apply_one(b, f)?;
        }
        Ok(())
    }
    fn set_training(&mut self, mode: bool) {
        self.training = mode;
    }
}

/// `nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
/// activation="relu", batch_first, norm_first)`.
pub struct TransformerEncoderLayer {
    /// `self_attn`
    pub self_attn: MultiheadAttention,
    /// `linear1`
    pub linear1: Linear,
    /// `dropout` (inside the feed-forward block)
    pub dropout: Dropout,
    /// `linear2`
    pub linear2: Linear,
    /// `norm_first`
    pub norm_first: bool,
    /// `norm1`
    pub norm1: LayerNorm,
    /// `norm2`
    pub norm2: LayerNorm,
    /// `dropout1`
    pub dropout1: Dropout,
    /// `dropout2`
    pub dropout2: Dropout,
    /// GELU instead of ReLU
    pub gelu: bool,
    /// `module.training`
    pub training: bool,
}

impl TransformerEncoderLayer {
    /// A CPU-initialised layer in training mode.
    pub fn new(
        rt: &Runtime,
        d_model: i64,
        nhead: i64,
        dim_feedforward: i64,
        dropout: f64,
        batch_first: bool,
        norm_first: bool,
    ) -> Result<Self> {
        Ok(TransformerEncoderLayer {
            self_attn: MultiheadAttention::new(rt, d_model, nhead, dropout, true, batch_first)?,
            linear1: Linear::new(rt, d_model, dim_feedforward, true)?,
            dropout: Dropout::new(dropout),
            linear2: Linear::new(rt, dim_feedforward, d_model, true)?,
            norm_first,
            norm1: LayerNorm::new(rt, &[d_model])?,
            norm2: LayerNorm::new(rt, &[d_model])?,
            dropout1: Dropout::new(dropout),
            dropout2: Dropout::new(dropout),
            gelu: false,
            training: true,
        })
    }

    /// `_sa_block(x)`: takes the argument's reference as a CPython frame
    /// does, so `x = self.self_attn(x, x, x, ...)[0]` drops a temporary
    /// argument (the `norm1(x)` of `norm_first`) before `dropout1`.
    fn sa_block(&self, x: Tensor) -> Result<Tensor> {
        let a = self.self_attn.self_attention(&x, false)?.0;
        drop(x);
        self.dropout1.forward(&a)
    }

    /// `_ff_block(x)`: `x = linear2(dropout(activation(linear1(x))))` drops
    /// the argument before `dropout2`.
    fn ff_block(&self, x: Tensor) -> Result<Tensor> {
        let h = self.linear1.forward(&x)?;
        let a = if self.gelu { h.gelu()? } else { h.relu()? };
        drop(h);
        let d = self.dropout.forward(&a)?;
        drop(a);
        let y = self.linear2.forward(&d)?;
        drop(d);
        drop(x);
        self.dropout2.forward(&y)
    }
}

impl TransformerEncoderLayer {
    /// `torch._transformer_encoder_layer_fwd` (transformer.cpp,
    /// `transformer_encoder_layer_forward`): `norm` is `at::layer_norm` (the
    /// op's mean and rstd die at once), the attention is
    /// `_native_multi_head_attention(x, x, x, ..., need_weights=False)`, the
    /// residuals are added in place, and `ffn` is `gemm_nt_bias` (2-D
    /// `linear`), `relu_` in place (or `gelu`), `gemm_nt_bias`; a rebound `x`
    /// frees its old value, `pre_ffn_res` dies on return.
    fn fast_forward(&self, src: &Tensor) -> Result<Tensor> {
        let norm = |x: &Tensor, ln: &LayerNorm| {
            x.layer_norm(&ln.normalized, Some(&ln.weight), Some(&ln.bias))
        };
        let sa = &self.self_attn;
        let bias = sa
            .in_proj_bias
            .as_ref()
            .ok_or_else(|| EngineError::Unsupported {
                what: "_transformer_encoder_layer_fwd without an in_proj bias".into(),
            })?;
        let mut x = src.clone();
        if self.norm_first {
            x = norm(&x, &self.norm1)?;
        }
        let (a, _) = native_multi_head_attention(
            &x,
            sa.embed_dim,
            sa.num_heads,
            &sa.in_proj_weight,
            bias,
            &sa.out_proj.weight,
            sa.out_proj.bias.as_ref(),
            false,
        )?;
        x = a;
        x.add_(src, 1.0)?;
        if !self.norm_first {
            x = norm(&x, &self.norm1)?;
        }
        let pre_ffn_res = x.clone();
        if self.norm_first {
            x = norm(&x, &self.norm2)?;
        }
        // ffn(x, w1, b1, w2, b2, use_gelu)
        x = {
            let gemm_nt_bias = |a: &Tensor, l: &Linear| -> Result<Tensor> {
                let (b, t, d) = (a.size(0), a.size(1), a.size(2));
                let a2 = a.view(&[b * t, d])?;
                let r = a2.linear(&l.weight, l.bias.as_ref())?;
                let n = r.size(1);
                r.view(&[b, t, n])
            };
            let mut res = gemm_nt_bias(&x, &self.linear1)?;
            if self.gelu {
                res = res.gelu()?;
            } else {
                res.scalar_("relu_")?;
            }
            res = gemm_nt_bias(&res, &self.linear2)?;
            res
        };
        x.add_(&pre_ffn_res, 1.0)?;
        if !self.norm_first {
            x = norm(&x, &self.norm2)?;
        }
        drop(pre_ffn_res);
        Ok(x)
    }
}

/// `native_multi_head_attention_cuda` (attention.cu, PyTorch 2.11) for
/// self-attention (`query is key is value`) without a mask. When the head
/// dim is a multiple of 8, weights are not needed and SDPA would pick a fused
/// kernel (flash, memory-efficient or cuDNN), it runs `linear(x, qkv_w,
/// qkv_b)` (`_flatten_nd_linear` → `addmm`), SDPA on head views of the three
/// chunks, and `linear` of the head-merged result (a view: the fused
/// outputs are in `(B, T, H, D)` order); the SDPA result dies before the
/// packed projection when it returns. Otherwise the explicit path:
/// `gemm_nt` (`mm`), `_transform_bias_rescale_qkv` into one `(3, B, H, T,
/// Dh)` buffer (the projection dies), `bmm_nt` scores, an in-place softmax,
/// `bmm_nn` into q's storage, the scores dropped unless the weights are
/// returned, `transform_0213` (a contiguous `(B, T, D)` copy) and `linear`;
/// with weights, their head sum divided in place.
#[allow(clippy::too_many_arguments)]
pub(crate) fn native_multi_head_attention(
    x: &Tensor,
    embed_dim: i64,
    num_heads: i64,
    qkv_weight: &Tensor,
    qkv_bias: &Tensor,
    proj_weight: &Tensor,
    proj_bias: Option<&Tensor>,
    need_weights: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let rt = x.runtime().clone();
    if x.dim() != 3 || x.size(2) != embed_dim || num_heads <= 0 || embed_dim % num_heads != 0 {
        return Err(EngineError::Mismatch {
            op: "_native_multi_head_attention",
            detail: format!(
                "expected a (B, T, {embed_dim}) query with {num_heads} heads dividing it, got {:?}",
                x.sizes()
            ),
        });
    }
    let (b, t) = (x.size(0), x.size(1));
    let dh = embed_dim / num_heads;
    let heads =
        |c: &Tensor| -> Result<Tensor> { Ok(c.view(&[b, t, num_heads, dh])?.transpose(1, 2)) };
    if dh % 8 == 0 && !need_weights {
        let (q, k, v) = (heads(x)?, heads(x)?, heads(x)?);
        let backend = Tensor::sdpa_backend(&q, &k, &v, &SdpaArgs::default())?;
        drop((q, k, v));
        if backend != SdpaBackend::Math {
            let packed = x.linear(qkv_weight, Some(qkv_bias))?;
            let chunks: Vec<Tensor> = (0..3)
                .map(|i| heads(&packed.narrow(-1, i * embed_dim, embed_dim)))
                .collect::<Result<_>>()?;
            let y = Tensor::sdpa(&chunks[0], &chunks[1], &chunks[2], &SdpaArgs::default())?;
            let past = y.transpose(1, 2).reshape(&[b, t, embed_dim])?;
            let out = past.linear(proj_weight, proj_bias)?;
            drop(past);
            drop(y);
            drop(chunks);
            drop(packed);
            return Ok((out, None));
        }
    }
    // qkv_projection → gemm_nt(query, qkv_weight): matmul of the (B*T, D) view
    let qkv = {
        let a = x.view(&[b * t, embed_dim])?;
        let wt = qkv_weight.t();
        let r = a.mm(&wt)?;
        r.view(&[b, t, 3 * embed_dim])?
    };
    // _transform_bias_rescale_qkv: one (3, B, H, T, Dh) buffer, split three ways
    let qkv_buf = rt.empty(&[3, b, num_heads, t, dh], x.dtype(), x.device())?;
    drop(qkv);
    let q = qkv_buf.select(0, 0);
    let k = qkv_buf.select(0, 1);
    let v = qkv_buf.select(0, 2);
    // bmm_nt(q, k): (B*H, T, T) scores, softmax in place (_softmax_out)
    let qkt = {
        let a = q.reshape(&[b * num_heads, t, dh])?;
        let bb = k.reshape(&[b * num_heads, t, dh])?;
        let bt = bb.transpose(1, 2);
        let c = a.bmm(&bt)?;
        c.view(&[b, num_heads, t, t])?
    };
    // bmm_nn(q, qkt, v): written into q's storage, no allocation
    let attn_ctx = q.clone();
    let mut weights = if need_weights {
        Some(qkt)
    } else {
        drop(qkt);
        None
    };
    // transform0213_gemm_nt_bias: permute(0, 2, 1, 3).contiguous() then linear
    let proj = {
        let a = attn_ctx.permute(&[0, 2, 1, 3]).contiguous()?;
        let a2 = a.view(&[b * t, embed_dim])?;
        let r = a2.linear(proj_weight, proj_bias)?;
        drop(a2);
        drop(a);
        r.view(&[b, t, embed_dim])?
    };
    // need_weights && average_attn_weights: qkt = qkt.sum(1); qkt /= num_head
    if let Some(w) = weights.take() {
        let s = w.sum_dims(&[1], false)?;
        drop(w);
        weights = Some(s);
    }
    drop(attn_ctx);
    drop((q, k, v));
    drop(qkv_buf);
    Ok((proj, weights))
}

impl Module for TransformerEncoderLayer {
    fn forward(&self, src: &Tensor) -> Result<Tensor> {
        let rt = src.runtime().clone();
        rt.in_module("TransformerEncoderLayer", || {
            // TransformerEncoderLayer.forward's why_not_sparsity_fast_path
            // (2.11): batched, eval, batch_first, an in_proj bias, an even
            // head count, no gradient to record
            let grads = rt.is_grad_enabled()
                && (src.requires_grad() || self.parameters().iter().any(|p| p.requires_grad()));
            let fast = !self.training
                && src.dim() == 3
                && self.self_attn.batch_first
                && self.self_attn.in_proj_bias.is_some()
                && self.self_attn.num_heads % 2 == 0
                && !grads;
            if fast {
                return self.fast_forward(src);
            }
            let mut x = src.clone();
            if self.norm_first {
                let s = self.sa_block(self.norm1.forward(&x)?)?;
                let y = x.add(&s)?;
                drop(s);
                x = y;
                let f = self.ff_block(self.norm2.forward(&x)?)?;
                let y = x.add(&f)?;
                drop(f);
                x = y;
            } else {
                let s = self.sa_block(x.clone())?;
                let a = x.add(&s)?;
                drop(s);
                let n = self.norm1.forward(&a)?;
                drop(a);
                x = n;
                let f = self.ff_block(x.clone())?;
                let a = x.add(&f)?;
                drop(f);
                let n = self.norm2.forward(&a)?;
                drop(a);
                x = n;
            }
            Ok(x)
        })
    }
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = self.self_attn.parameters();
        v.extend(self.linear1.parameters());
        v.extend(self.linear2.parameters());
        v.extend(self.norm1.parameters());
        v.extend(self.norm2.parameters());
        v
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.self_attn.apply_params(f)?;
        self.linear1.apply_params(f)?;
        self.linear2.apply_params(f)?;
        self.norm1.apply_params(f)?;
        self.norm2.apply_params(f)
    }
    fn set_training(&mut self, mode: bool) {
        self.training = mode;
        self.self_attn.set_training(mode);
        for d in [&mut self.dropout, &mut self.dropout1, &mut self.dropout2] {
            d.set_training(mode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Device;

    fn events(rt: &Runtime) -> Vec<(String, u64)> {
        rt.trace()
            .into_iter()
            .filter(|e| matches!(e.action.as_str(), "alloc" | "free_requested"))
            .map(|e| (e.action.as_str().to_string(), e.size))
            .collect()
    }

    fn mha(rt: &Runtime, e: i64, h: i64) -> MultiheadAttention {
        let mut m = MultiheadAttention::new(rt, e, h, 0.0, true, true).unwrap();
        m.cuda().unwrap();
        m.eval();
        m
    }

    #[test]
    fn fast_path_only_in_eval_without_gradients() {
        let rt = Runtime::default();
        let mut m = mha(&rt, 64, 4);
        let x = rt.randn(&[2, 16, 64], DType::F32, Device::Cuda).unwrap();
        // parameters require grad and grad mode is on: the regular path
        assert!(!m.fast_path(&x));
        let y = m.self_attention(&x, false).unwrap().0;
        assert!(y.grad_fn().is_some());
        assert!(rt.no_grad(|| m.fast_path(&x)));
        m.train();
        assert!(!rt.no_grad(|| m.fast_path(&x)), "training");
        m.eval();
        let odd = mha(&rt, 60, 3);
        assert!(
            !rt.no_grad(|| odd.fast_path(&x.narrow(-1, 0, 60))),
            "odd head count"
        );
    }

    #[test]
    fn native_mha_explicit_path_with_weights() {
        // need_weights=True skips SDPA: mm projection (B*T, 3E); the
        // (3, B, H, T, Dh) buffer (the projection dies); the (B*H, T, T)
        // scores (softmax in place, bmm_nn into q's storage); the 0213
        // copy and the out projection; the head-summed weights (B, T, T)
        let rt = Runtime::default();
        let (b, t, e, h) = (2, 16, 64, 4);
        let m = mha(&rt, e, h);
        let x = rt.randn(&[b, t, e], DType::F32, Device::Cuda).unwrap();
        rt.no_grad(|| m.self_attention(&x, false).unwrap()); // cuBLAS workspace, Lt workspace
        rt.record_memory_history(true);
        let (out, w) = rt.no_grad(|| m.self_attention(&x, true).unwrap());
        let f = 4u64;
        let proj = (b * t * 3 * e) as u64 * f;
        let scores = (b * h * t * t) as u64 * f;
        let bte = (b * t * e) as u64 * f;
        let sum = (b * t * t) as u64 * f;
        let a = |n: u64| ("alloc".to_string(), n);
        let fr = |n: u64| ("free_requested".to_string(), n);
        assert_eq!(
            events(&rt),
            vec![
                a(proj),
                a(proj),
                fr(proj),
                a(scores),
                a(bte),
                a(bte),
                fr(bte),
                a(sum),
                fr(scores),
                fr(proj)
            ]
        );
        assert_eq!(out.sizes(), &[b, t, e]);
        assert_eq!(w.unwrap().sizes(), &[b, t, t]);
    }

    #[test]
    fn native_mha_fused_path_frees_the_attention_before_the_projection() {
        // cuDNN inside _native_multi_head_attention (bf16): packed
        // projection, seed/offset, output, workspace, the philox pair
        // freed, the out projection, then the attention output and the
        // packed projection die
        let rt = Runtime::default();
        let (b, t, e, h) = (2, 16, 64, 4);
        let mut m = MultiheadAttention::new(&rt, e, h, 0.0, true, true).unwrap();
        let f = &mut |p: &Tensor| p.to_dtype(DType::BF16);
        m.apply_params(f).unwrap();
        m.cuda().unwrap();
        m.eval();
        let x = rt.randn(&[b, t, e], DType::BF16, Device::Cuda).unwrap();
        rt.no_grad(|| m.self_attention(&x, false).unwrap());
        rt.record_memory_history(true);
        let (out, w) = rt.no_grad(|| m.self_attention(&x, false).unwrap());
        assert!(w.is_none());
        let proj = (b * t * 3 * e * 2) as u64;
        let bte = (b * t * e * 2) as u64;
        let a = |n: u64| ("alloc".to_string(), n);
        let fr = |n: u64| ("free_requested".to_string(), n);
        assert_eq!(
            events(&rt),
            vec![
                a(proj),
                a(8),
                a(8),
                a(bte),
                a(256),
                fr(256),
                fr(8),
                fr(8),
                a(bte),
                fr(bte),
                fr(proj)
            ]
        );
        assert_eq!(out.sizes(), &[b, t, e]);
    }
}
