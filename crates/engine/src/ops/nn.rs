//! Neural-network kernels: layer norm, dropout, softmax, embedding and
//! losses (attention is in `ops/attention.rs`), with the allocations their CUDA implementations
//! make and the tensors their autograd nodes save.

use crate::autograd::{Backward, Pending};
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{shape_err, EngineError, Result};
use crate::ops::empty_like;
use crate::runtime::Category;
use crate::tensor::Tensor;

impl Tensor {
    /// `F.layer_norm(x, normalized_shape, weight, bias)` →
    /// `native_layer_norm`: output (contiguous), `mean` and `rstd` (fp32, one
    /// per row). `NativeLayerNormBackward0` saves input, weight, bias, mean, rstd.
    pub fn layer_norm(
        &self,
        normalized: &[i64],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        crate::autocast!(self.rt(), "layer_norm", [self, weight, bias] => |a| a.t(0).layer_norm(normalized, a.opt(1), a.opt(2)));
        let nd = normalized.len();
        if self.dim() < nd || &self.sizes()[self.dim() - nd..] != normalized {
            return Err(shape_err(
                "layer_norm",
                format!(
                    "input {:?} vs normalized_shape {normalized:?}",
                    self.sizes()
                ),
            ));
        }
        let mut pending = Pending::begin(self.rt(), &[Some(self), weight, bias]);
        let mut slots = [None; 5];
        if let Some(p) = &mut pending {
            // release_variables(): bias_, input_, weight_, result1_, result2_
            if let Some(b) = bias {
                slots[0] = Some(p.save(b));
            }
            slots[1] = Some(p.save(self));
            if let Some(w) = weight {
                slots[2] = Some(p.save(w));
            }
        }
        let rt = self.rt().clone();
        let x = self.contiguous()?;
        let m: i64 = self.sizes()[..self.dim() - nd].iter().product();
        let y = rt.empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            "native_layer_norm",
            Category::Output,
        )?;
        let acc = self.dtype().acc_type();
        let mean = rt.empty_op(
            &[m],
            acc,
            self.device(),
            "native_layer_norm",
            Category::Output,
        )?;
        let rstd = rt.empty_op(
            &[m],
            acc,
            self.device(),
            "native_layer_norm",
            Category::Output,
        )?;
        drop(x);
        let mut stat_shape: Vec<i64> = self.sizes()[..self.dim() - nd].to_vec();
        stat_shape.extend(std::iter::repeat_n(1, nd));
        let mean = mean.view(&stat_shape)?;
        let rstd = rstd.view(&stat_shape)?;
        if let Some(p) = pending {
            p.finish_saving(
                |p| {
                    slots[3] = Some(p.save_output(&mean));
                    slots[4] = Some(p.save_output(&rstd));
                    Backward::LayerNorm {
                        slots,
                        normalized: Dims::new(normalized),
                    }
                },
                &[&y],
            );
        }
        // attention (SDPA) engineer: the op's (out, mean, rstd) tuple dies in
        // element order, mean before rstd (enc_fast on the H100)
        drop(mean);
        drop(rstd);
        Ok(y)
    }

    /// `F.dropout(x, p, training)` → `native_dropout` when training with
    /// 0 < p < 1 on CUDA: a bool mask (1 byte/element), then the output;
    /// `NativeDropoutBackward0` saves the mask. Otherwise `x` itself.
    pub fn dropout(&self, p: f64, training: bool) -> Result<Tensor> {
        if !(training && p > 0.0 && p < 1.0 && self.numel() > 0 && self.device() == Device::Cuda) {
            if training && p >= 1.0 {
                return Err(EngineError::Unsupported {
                    what: "dropout with p = 1".into(),
                });
            }
            return Ok(self.clone());
        }
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let mask = empty_like(self, DType::Bool, "native_dropout", Category::Output)?;
        let out = empty_like(self, self.dtype(), "native_dropout", Category::Output)?;
        if let Some(pd) = pending {
            pd.finish_saving(
                |pd| {
                    let slot = pd.save_output(&mask);
                    Backward::Dropout { mask: slot, p }
                },
                &[&out],
            );
        }
        Ok(out)
    }

    pub(crate) fn softmax_impl(&self, dim: i64, log: bool) -> Result<Tensor> {
        let d = self.wrap_dim(dim);
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let x = self.contiguous()?;
        let op = if log { "_log_softmax" } else { "_softmax" };
        let out = self.rt().empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            op,
            Category::Output,
        )?;
        drop(x);
        if let Some(p) = pending {
            p.finish_saving(
                |p| {
                    let slot = p.save_output(&out);
                    Backward::Softmax {
                        result: slot,
                        dim: d,
                        log,
                    }
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `F.softmax(x, dim)`: `SoftmaxBackward0` saves the result.
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        self.softmax_dtype(dim, None) // softmax.int(dtype=None): autocast.rs
    }
    /// `F.log_softmax(x, dim)`: `LogSoftmaxBackward0` saves the result.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        self.log_softmax_dtype(dim, None) // log_softmax.int(dtype=None): autocast.rs
    }

    /// `F.mse_loss(input, target, reduction="mean")`. `mse_loss` is a
    /// structured kernel whose meta function builds a TensorIterator output
    /// of the input's full size and then `resize_({})`s it, so the 0-dim
    /// result keeps a storage of `numel` elements; the unreduced loss is a
    /// temporary reduced into it with `mean_out`. `MseLossBackward0` saves
    /// self and target.
    pub fn mse_loss(&self, target: &Tensor) -> Result<Tensor> {
        crate::autocast!(self.rt(), "mse_loss", [self, target] => |a| a.t(0).mse_loss(a.t(1)));
        let mut pending = Pending::begin(self.rt(), &[Some(self), Some(target)]);
        let slots = pending.as_mut().map(|p| (p.save(self), p.save(target)));
        let rt = self.rt().clone();
        let full = rt.empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            "mse_loss",
            Category::Output,
        )?;
        let result = full.alias_with(Dims::default(), Dims::default(), 0);
        drop(full);
        let loss = rt.empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            "mse_loss",
            Category::Temporary,
        )?;
        // mean_out(result, loss): the reduction's scratch, if any
        if self.device() == Device::Cuda && self.numel() > 0 {
            let red = vec![true; self.dim()];
            for sc in crate::ops::reduce::reduce_scratch(&rt, &loss, &red, self.dtype().acc_type())
            {
                if sc.buffer > 0 {
                    let b = rt.storage(sc.buffer, Device::Cuda, "mean", Category::Workspace)?;
                    let s = rt.storage(sc.semaphores, Device::Cuda, "mean", Category::Workspace)?;
                    drop(s);
                    drop(b);
                }
            }
        }
        drop(loss);
        // the result is a fresh tensor, not a view, for autograd
        let result = Tensor::from_parts(
            result.0.storage.clone(),
            Dims::default(),
            Dims::default(),
            0,
            self.dtype(),
            self.device(),
            std::rc::Rc::new(std::cell::Cell::new(0)),
            false,
        );
        if let (Some(p), Some((s, t))) = (pending, slots) {
            p.finish(
                Backward::MseLoss {
                    self_: s,
                    target: t,
                },
                &[&result],
            );
        }
        Ok(result)
    }

    /// `F.nll_loss(log_probs, target)` (mean reduction): output and
    /// `total_weight` scalars; `NllLossBackward0` saves self, target, total_weight.
    pub fn nll_loss(&self, target: &Tensor) -> Result<Tensor> {
        crate::autocast!(self.rt(), "nll_loss", [self, target] => |a| a.t(0).nll_loss(a.t(1)));
        let mut pending = Pending::begin(self.rt(), &[Some(self)]);
        let slots = pending.as_mut().map(|p| (p.save(self), p.save(target)));
        let rt = self.rt().clone();
        let out = rt.empty_op(
            &[],
            self.dtype(),
            self.device(),
            "nll_loss_forward",
            Category::Output,
        )?;
        let total_weight = rt.empty_op(
            &[],
            self.dtype(),
            self.device(),
            "nll_loss_forward",
            Category::Output,
        )?;
        if let (Some(p), Some((s, t))) = (pending, slots) {
            p.finish_saving(
                |p| {
                    let tw = p.save_output(&total_weight);
                    Backward::NllLoss {
                        self_: s,
                        target: t,
                        total_weight: tw,
                    }
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `F.cross_entropy(logits, target)` = `nll_loss(log_softmax(logits, 1), target)`.
    pub fn cross_entropy(&self, target: &Tensor) -> Result<Tensor> {
        let dim = if self.dim() == 1 { 0 } else { 1 };
        let lsm = self.log_softmax_dtype(dim, Some(self.dtype()))?; // at::log_softmax(self, class_dim, self.scalar_type())
        lsm.nll_loss(target)
    }

    /// `F.embedding(indices, weight)`: `weight.index_select(0, indices.reshape(-1)).view(...)`;
    /// `EmbeddingBackward0` saves the indices.
    pub fn embedding(weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
        let mut pending = Pending::begin(weight.rt(), &[Some(weight)]);
        let slot = pending.as_mut().map(|p| p.save(indices));
        let mut shape: Vec<i64> = indices.sizes().to_vec();
        shape.push(weight.sizes()[1]);
        let out = weight.rt().empty_op(
            &shape,
            weight.dtype(),
            weight.device(),
            "index_select",
            Category::Output,
        )?;
        if let (Some(p), Some(s)) = (pending, slot) {
            p.finish(
                Backward::Embedding {
                    indices: s,
                    num_weights: weight.sizes()[0],
                },
                &[&out],
            );
        }
        Ok(out)
    }
}
