//! `nn.MultiheadAttention` (`F.multi_head_attention_forward`) and
//! `nn.TransformerEncoderLayer`, op by op as PyTorch 2.11 runs them.

use crate::dtype::DType;
use crate::error::{EngineError, Result};
use crate::nn::{apply_one, parameter, Dropout, LayerNorm, Linear, Module};
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
            if !self.training
                && !rt.is_grad_enabled()
                && self.batch_first
                && self.in_proj_bias.is_some()
            {
                return Err(EngineError::Unsupported {
                    what: "MultiheadAttention fast path (_native_multi_head_attention)".into(),
                });
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
                let b = a.unsqueeze(0);
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

    fn sa_block(&self, x: &Tensor) -> Result<Tensor> {
        let a = self.self_attn.self_attention(x, false)?.0;
        self.dropout1.forward(&a)
    }

    fn ff_block(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.linear1.forward(x)?;
        let a = if self.gelu { h.gelu()? } else { h.relu()? };
        drop(h);
        let d = self.dropout.forward(&a)?;
        drop(a);
        let y = self.linear2.forward(&d)?;
        drop(d);
        self.dropout2.forward(&y)
    }
}

impl Module for TransformerEncoderLayer {
    fn forward(&self, src: &Tensor) -> Result<Tensor> {
        let rt = src.runtime().clone();
        rt.in_module("TransformerEncoderLayer", || {
            let fast = !self.training
                && src.dim() == 3
                && self.self_attn.batch_first
                && self.self_attn.num_heads % 2 == 0;
            if fast
                && !(rt.is_grad_enabled() && self.parameters().iter().any(|p| p.requires_grad()))
            {
                return Err(EngineError::Unsupported {
                    what: "TransformerEncoderLayer fast path (_transformer_encoder_layer_fwd)"
                        .into(),
                });
            }
            let mut x = src.clone();
            if self.norm_first {
                let n = self.norm1.forward(&x)?;
                let s = self.sa_block(&n)?;
                drop(n);
                let y = x.add(&s)?;
                drop(s);
                x = y;
                let n = self.norm2.forward(&x)?;
                let f = self.ff_block(&n)?;
                drop(n);
                let y = x.add(&f)?;
                drop(f);
                x = y;
            } else {
                let s = self.sa_block(&x)?;
                let a = x.add(&s)?;
                drop(s);
                let n = self.norm1.forward(&a)?;
                drop(a);
                x = n;
                let f = self.ff_block(&x)?;
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
