//! Neural-network kernels: layer norm, dropout, softmax, embedding and
//! losses (attention is in `ops/attention.rs`), with the allocations their CUDA implementations
//! make and the tensors their autograd nodes save.

use crate::autograd::{Backward, Pending};
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{shape_err, EngineError, Result};
use crate::ops::empty_like;
use crate::runtime::{Category, DeviceProfile};
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
        // the op's (out, mean, rstd) tuple dies in
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
        let d = self.try_wrap_dim(if log { "log_softmax" } else { "softmax" }, dim)?;
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
            crate::ops::reduce::alloc_reduce_scratch(
                &rt,
                &loss,
                &red,
                self.dtype().acc_type(),
                "mean",
            )?;
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

/// The most indices `embedding_dense_backward_cuda` sends to its direct
/// kernel (`num_indices <= 3072 && !scale_grad_by_freq`,
/// ATen/native/cuda/Embedding.cu); more take the sorting path.
pub(crate) const EMBEDDING_BACKWARD_DIRECT_MAX: i64 = 3072;

/// `embedding_dense_backward_cuda` (ATen/native/cuda/Embedding.cu) for the
/// gradient `grad` of an embedding of `num_weights` rows looked up at
/// `indices`:
/// - `indices_.contiguous()` (a copy for expanded indices, e.g. BERT's
///   buffered `token_type_ids.expand(batch, seq)`), then
///   `grad_.contiguous()`;
/// - with at most 3072 indices (no `scale_grad_by_freq`): one zeroed
///   `(num_weights, dim)` gradient filled by `embedding_backward_feature_kernel`;
/// - beyond: `sorted_indices` and `orig_indices` (`empty_like(indices)`), an
///   `arange` and `radix_sort_pairs`' CUB storage (dying with the dispatch
///   lambda), then `embedding_backward_cuda_kernel`
///   (ATen/native/cuda/EmbeddingBackwardKernel.cu).
///
/// The copies die at return, the gradient's first (declared last).
pub(crate) fn embedding_dense_backward(
    grad: &Tensor,
    indices: &Tensor,
    num_weights: i64,
) -> Result<Tensor> {
    embedding_sorted_backward(grad, indices, num_weights, EmbeddingPath::default())
}

/// Which of `embedding_backward_cuda_kernel`'s callers runs it, and under
/// what flags: both decide its paths ([`SegmentProblem`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EmbeddingPath {
    /// `embedding_bag_backward_cuda_sum_avg` (EmbeddingBag.cu): it sorts any
    /// number of indices (no direct kernel) and passes `offset2bag`, which
    /// keeps the kernel off its fused path (`!offset2bag.defined()`)
    pub bags: bool,
    /// `torch.use_deterministic_algorithms(True)`: no fused path
    /// (`!at::globalContext().deterministicAlgorithms()`)
    pub deterministic: bool,
}

/// [`embedding_dense_backward`], or the bags' backward (`path.bags`: the
/// indices made contiguous, then always the sort and the kernel).
pub(crate) fn embedding_sorted_backward(
    grad: &Tensor,
    indices: &Tensor,
    num_weights: i64,
    path: EmbeddingPath,
) -> Result<Tensor> {
    let rt = grad.rt().clone();
    let op = "embedding_dense_backward";
    let dev = grad.device();
    let tmp = |sizes: &[i64], dtype: DType| rt.empty_op(sizes, dtype, dev, op, Category::Temporary);
    let idx_copy = if indices.is_contiguous() {
        None
    } else {
        Some(tmp(indices.sizes(), indices.dtype())?)
    };
    let grad_copy = if grad.is_contiguous() {
        None
    } else {
        Some(tmp(grad.sizes(), grad.dtype())?)
    };
    let n = indices.numel();
    let dim = *grad.sizes().last().unwrap_or(&1);
    if !path.bags {
        rt.note_switch(n, EMBEDDING_BACKWARD_DIRECT_MAX);
    }
    let gw = if !path.bags && n <= EMBEDDING_BACKWARD_DIRECT_MAX {
        rt.empty_op(
            &[num_weights, dim],
            grad.dtype(),
            dev,
            op,
            Category::Gradient,
        )?
    } else {
        let idt = indices.dtype();
        let sorted = tmp(&[n], idt)?;
        let orig = tmp(&[n], idt)?;
        {
            // AT_DISPATCH_INDEX_TYPES lambda: `range = at::arange(n)`, then
            // `cuda::cub::radix_sort_pairs(indices, sorted, range, orig, n)`
            let range = tmp(&[n], idt)?;
            let bytes = crate::ops::cub::radix_sort_pairs_bytes(
                rt.profile().cub_policies,
                n as u64,
                idt.size(),
                idt.size(),
                8 * idt.size(),
            )?;
            let rule = crate::scratch::ScratchRule::RadixSortPairs {
                n,
                key_bytes: idt.size(),
                value_bytes: idt.size(),
                end_bit: 8 * idt.size(),
            };
            let cub = rt.scratch(bytes, rule, op)?;
            drop(cub);
            drop(range);
        }
        let gw = embedding_backward_cuda_kernel(grad, &sorted, num_weights, path)?;
        drop(orig);
        drop(sorted);
        gw
    };
    drop(grad_copy);
    drop(idx_copy);
    Ok(gw)
}

/// A buffer of `embedding_backward_cuda_kernel` whose length follows the
/// number of segments (not a product of the input's dimensions: it takes a
/// `min` and an integer division of the index count), kept as a rule with
/// the allocation so a batch template can size it at other batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentBuffer {
    /// `partials_per_segment`: `max_segments` indices
    PartialsPerSegment,
    /// `partials_per_segment_offset`: `max_segments` indices
    PartialsPerSegmentOffset,
    /// CUB's temporary storage for the `exclusive_sum` of
    /// `partials_per_segment` (`max_segments` indices)
    ExclusiveSumStorage,
    /// `partial_segment_offset`: `max_partial_segment` indices
    PartialSegmentOffset,
    /// the fused path's `partial_to_segment_idx`: `max_partial_segment` indices
    PartialToSegmentIdx,
    /// the fused path's op-math `(num_weights, stride)` accumulator (16-bit
    /// gradients only)
    Accumulator,
    /// the two-pass path's `grad_weight_per_segment`: `max_partial_segment`
    /// rows of `stride` in the op-math type
    GradWeightPerSegment,
}

/// The sizes `embedding_backward_cuda_kernel` (EmbeddingBackwardKernel.cu)
/// derives from `n` sorted indices into `num_weights` rows of `stride`
/// elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentProblem {
    /// indices
    pub n: i64,
    /// rows of the weight
    pub num_weights: i64,
    /// elements per row
    pub stride: i64,
    /// the indices' dtype
    pub index: DType,
    /// the gradient's dtype (its op-math type accumulates)
    pub grad: DType,
    /// the caller and flags ([`EmbeddingPath`])
    pub path: EmbeddingPath,
}

impl SegmentProblem {
    /// `NROWS_PER_THREAD`, `MAX_BLOCK_SIZE` and
    /// `MAX_ATOMIC_ACCUM_BLOCKS_PER_SM` of EmbeddingBackwardKernel.cu.
    const NROWS_PER_THREAD: i64 = 10;
    const MAX_BLOCK_SIZE: i64 = 1024;
    const MAX_ATOMIC_ACCUM_BLOCKS_PER_SM: i64 = 4;

    /// CUB's storage for the exclusive sum over `max_segments` indices
    fn exclusive_sum_bytes(&self, capability: (u32, u32)) -> Result<u64> {
        crate::ops::cub::exclusive_sum_bytes(
            capability,
            self.max_segments() as u64,
            self.index.size(),
        )
    }

    /// `max_segments = min(numel, num_weights)`
    fn max_segments(&self) -> i64 {
        self.n.min(self.num_weights)
    }

    /// `max_partial_segment = numel / NROWS_PER_THREAD + max_segments`
    fn max_partial_segment(&self) -> i64 {
        self.n / Self::NROWS_PER_THREAD + self.max_segments()
    }

    /// The fused atomic path: `sum_and_scatter`'s grid,
    /// `ceil(max_segments * stride_warped / block)`, under `4 x SMs` and
    /// `max_partial_segment` over 4 times it, with no bags (`offset2bag`
    /// undefined) and deterministic algorithms off.
    fn fused(&self, sm_count: u32) -> bool {
        if self.path.bags || self.path.deterministic {
            return false;
        }
        let stride_warped = (self.stride + 31) / 32 * 32;
        let block = stride_warped.min(Self::MAX_BLOCK_SIZE);
        let grid = (self.max_segments() * stride_warped + block - 1) / block;
        grid < sm_count as i64 * Self::MAX_ATOMIC_ACCUM_BLOCKS_PER_SM
            && self.max_partial_segment() > grid * 4
    }

    /// The buffers the kernel allocates on a GPU of `sm_count` SMs, in
    /// order, with their shapes and dtypes (the sorting path: more than 3072
    /// indices, see [`embedding_dense_backward`]).
    fn buffers(&self, sm_count: u32) -> Vec<(SegmentBuffer, Vec<i64>, DType)> {
        use SegmentBuffer::*;
        let (segs, parts) = (self.max_segments(), self.max_partial_segment());
        let acc = self.grad.acc_type();
        let mut v = vec![
            (PartialsPerSegment, vec![segs], self.index),
            (PartialsPerSegmentOffset, vec![segs], self.index),
            (PartialSegmentOffset, vec![parts], self.index),
        ];
        if self.fused(sm_count) {
            v.push((PartialToSegmentIdx, vec![parts], self.index));
            if acc != self.grad {
                v.push((Accumulator, vec![self.num_weights, self.stride], acc));
            }
        } else {
            v.push((GradWeightPerSegment, vec![parts, self.stride], acc));
        }
        v
    }

    /// The bytes of `buffer` on `profile`'s GPU (`None` when the kernel
    /// takes a path without it, or the indices take the feature kernel
    /// instead).
    pub fn bytes(&self, buffer: SegmentBuffer, profile: &DeviceProfile) -> Option<u64> {
        if !self.path.bags && self.n <= EMBEDDING_BACKWARD_DIRECT_MAX {
            return None;
        }
        if buffer == SegmentBuffer::ExclusiveSumStorage {
            return self.exclusive_sum_bytes(profile.cub_policies).ok();
        }
        let (_, shape, dtype) = self
            .buffers(profile.sm_count)
            .into_iter()
            .find(|b| b.0 == buffer)?;
        let numel = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(u64::try_from(d).ok()?))?;
        numel.checked_mul(dtype.size())
    }
}

/// `embedding_backward_cuda_kernel(grad, orig_indices, sorted_indices, ...)`
/// (ATen/native/cuda/EmbeddingBackwardKernel.cu, no bags, no counts): the
/// zeroed gradient; `segment_offsets` (n indices) and `num_of_segments` (a
/// 0-dim int64); `cuda::cub::unique_by_key` (its `keys_out` buffer, n keys,
/// around CUB's storage); then, in the index-type lambda with
/// `max_segments = min(n, num_weights)`: `partials_per_segment` and its
/// `exclusive_sum` into `partials_per_segment_offset` (CUB storage),
/// `num_of_partial_segments` (0-dim int64) and `partial_segment_offset`
/// (`n / NROWS_PER_THREAD (10) + max_segments` indices). The two-pass path
/// adds `grad_weight_per_segment` (`max_partial_segment x dim` in the
/// op-math type); the fused atomic path instead `partial_to_segment_idx`
/// and, for half/bf16, an fp32 `(num_weights, dim)` accumulator copied back
/// ([`SegmentProblem`]). Locals die in reverse.
fn embedding_backward_cuda_kernel(
    grad: &Tensor,
    sorted: &Tensor,
    num_weights: i64,
    path: EmbeddingPath,
) -> Result<Tensor> {
    let rt = grad.rt().clone();
    let op = "embedding_dense_backward";
    let dev = grad.device();
    let profile = rt.profile();
    let cap = profile.cub_policies;
    let tmp = |sizes: &[i64], dtype: DType| rt.empty_op(sizes, dtype, dev, op, Category::Temporary);
    let idt = sorted.dtype();
    let n = sorted.numel();
    let stride = *grad.sizes().last().unwrap_or(&1);
    let problem = SegmentProblem {
        n,
        num_weights,
        stride,
        index: idt,
        grad: grad.dtype(),
        path,
    };
    // a buffer sized by the segments, with its rule
    let segment_buffer = |(buffer, shape, dtype): (SegmentBuffer, Vec<i64>, DType)| {
        let t = tmp(&shape, dtype)?;
        if let Some(addr) = t.data_ptr() {
            rt.note_scratch_rule(
                addr,
                crate::scratch::ScratchRule::EmbeddingSegments { problem, buffer },
            );
        }
        Ok(t)
    };
    let gw = rt.empty_op(
        &[num_weights, stride],
        grad.dtype(),
        dev,
        op,
        Category::Gradient,
    )?;
    let segment_offsets = tmp(&[n], idt)?;
    let num_of_segments = tmp(&[], DType::I64)?;
    {
        // cuda::cub::unique_by_key: keys_out (allocator), then CUB_WRAPPER
        let keys_out = rt.storage(n as u64 * idt.size(), dev, op, Category::Temporary)?;
        let bytes = crate::ops::cub::unique_by_key_bytes(cap, n as u64, idt.size())?;
        let rule = crate::scratch::ScratchRule::UniqueByKey {
            n,
            key_bytes: idt.size(),
        };
        drop(rt.scratch(bytes, rule, op)?);
        drop(keys_out);
    }
    {
        let mut buffers = problem.buffers(profile.sm_count).into_iter();
        let mut next = || {
            buffers.next().ok_or_else(|| EngineError::Unsupported {
                what: "embedding backward without its segment buffers".into(),
            })
        };
        let partials_per_segment = segment_buffer(next()?)?;
        let partials_per_segment_offset = segment_buffer(next()?)?;
        let rule = crate::scratch::ScratchRule::EmbeddingSegments {
            problem,
            buffer: SegmentBuffer::ExclusiveSumStorage,
        };
        drop(rt.scratch(problem.exclusive_sum_bytes(cap)?, rule, op)?);
        let num_of_partial_segments = tmp(&[], DType::I64)?;
        let partial_segment_offset = segment_buffer(next()?)?;
        // the fused path's index map and accumulator, or the two-pass
        // path's per-segment gradient: each dies before the offsets
        let rest = buffers.map(segment_buffer).collect::<Result<Vec<_>>>()?;
        for t in rest.into_iter().rev() {
            drop(t);
        }
        drop(partial_segment_offset);
        drop(num_of_partial_segments);
        drop(partials_per_segment_offset);
        drop(partials_per_segment);
    }
    drop(num_of_segments);
    drop(segment_offsets);
    Ok(gw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Runtime;

    fn entries(rt: &Runtime, from: usize) -> Vec<(String, u64)> {
        rt.trace()
            .into_iter()
            .filter(|e| matches!(e.action.as_str(), "alloc" | "free_requested"))
            .skip(from)
            .map(|e| (e.action.as_str().to_string(), e.size))
            .collect()
    }

    fn count(rt: &Runtime) -> usize {
        entries(rt, 0).len()
    }

    fn a(n: u64) -> (String, u64) {
        ("alloc".into(), n)
    }
    fn f(n: u64) -> (String, u64) {
        ("free_requested".into(), n)
    }

    /// blind135/ee05's mean `EmbeddingBag` over 8 genres of 4,096 users (32,768
    /// indices into 512 rows of 32, fp32): the dense backward would take the
    /// fused path (a grid of 512 blocks under 4 x 132 SMs), but the bags'
    /// call passes `offset2bag`, and the H200's per-op record holds the
    /// two-pass path's per-segment gradient (3,788 x 32 fp32: 484,864 bytes
    /// where `partial_to_segment_idx` would take 30,304; 454,560 more a call).
    #[test]
    fn bags_and_deterministic_runs_take_the_two_pass_path() {
        let profile = crate::DeviceProfile::h200_torch_2_11();
        let problem = |path| SegmentProblem {
            n: 32768,
            num_weights: 512,
            stride: 32,
            index: DType::I64,
            grad: DType::F32,
            path,
        };
        let dense = problem(EmbeddingPath::default());
        assert_eq!(
            dense.bytes(SegmentBuffer::PartialToSegmentIdx, &profile),
            Some(30_304)
        );
        assert_eq!(
            dense.bytes(SegmentBuffer::GradWeightPerSegment, &profile),
            None
        );
        for path in [
            EmbeddingPath {
                bags: true,
                deterministic: false,
            },
            EmbeddingPath {
                bags: false,
                deterministic: true,
            },
        ] {
            let p = problem(path);
            assert_eq!(p.bytes(SegmentBuffer::PartialToSegmentIdx, &profile), None);
            assert_eq!(
                p.bytes(SegmentBuffer::GradWeightPerSegment, &profile),
                Some(484_864)
            );
        }
    }

    /// `embedding_bag_backward_cuda_sum_avg` has no direct kernel: bags of
    /// few indices sort as many do.
    #[test]
    fn bags_of_few_indices_sort() {
        let rt = Runtime::default();
        rt.record_memory_history(true);
        let ids = rt.zeros(&[64], DType::I64, Device::Cuda).unwrap();
        let g = rt.randn(&[64, 16], DType::F32, Device::Cuda).unwrap();
        let at = count(&rt);
        let bags = EmbeddingPath {
            bags: true,
            deterministic: false,
        };
        let gw = embedding_sorted_backward(&g, &ids, 100, bags).unwrap();
        assert_eq!(gw.sizes(), &[100, 16]);
        let allocs = entries(&rt, at).iter().filter(|e| e.0 == "alloc").count();
        assert!(allocs > 1, "{:?}", entries(&rt, at));
        let at = count(&rt);
        let direct = embedding_dense_backward(&g, &ids, 100).unwrap();
        assert_eq!(direct.sizes(), &[100, 16]);
        assert_eq!(entries(&rt, at), vec![a(100 * 16 * 4)]);
    }

    /// BERT's token type ids: a (1, 256) buffer expanded to (8, 256); the
    /// H100 trace of `bert_train_fp32` shows the contiguous copy of the
    /// indices before the (2, 512) gradient, freed after it.
    #[test]
    fn expanded_indices_are_copied_contiguous() {
        let rt = Runtime::default();
        rt.record_memory_history(true);
        let ids = rt.zeros(&[1, 256], DType::I64, Device::Cuda).unwrap();
        let ids = ids.expand(&[8, 256]).unwrap();
        let g = rt.randn(&[8, 256, 512], DType::F32, Device::Cuda).unwrap();
        let at = count(&rt);
        let gw = embedding_dense_backward(&g, &ids, 2).unwrap();
        assert_eq!(gw.sizes(), &[2, 512]);
        assert_eq!(entries(&rt, at), vec![a(16384), a(4096), f(16384)]);
    }

    /// More than 3072 indices: the sort and segment path, allocation for
    /// allocation as the H100 trace of `llama_train_bf16_ckpt` (4096 int64
    /// indices, 32000 x 512 bf16 weight) shows it.
    #[test]
    fn many_indices_take_the_sorting_path() {
        let rt = Runtime::default();
        rt.record_memory_history(true);
        let ids = rt.zeros(&[4, 1024], DType::I64, Device::Cuda).unwrap();
        let g = rt
            .randn(&[4, 1024, 512], DType::BF16, Device::Cuda)
            .unwrap();
        let at = count(&rt);
        let gw = embedding_dense_backward(&g, &ids, 32000).unwrap();
        assert_eq!(gw.sizes(), &[32000, 512]);
        let expected = vec![
            // sorted, orig, range, radix sort storage
            a(32768),
            a(32768),
            a(32768),
            a(83455),
            f(83455),
            f(32768),
            // grad_weight, segment_offsets, num_of_segments
            a(32768000),
            a(32768),
            a(8),
            // unique_by_key: keys_out, storage
            a(32768),
            a(1279),
            f(1279),
            f(32768),
            // partials_per_segment(_offset), exclusive_sum storage
            a(32768),
            a(32768),
            a(1279),
            f(1279),
            // num_of_partial_segments, partial_segment_offset (4096/10 + 4096),
            // grad_weight_per_segment (fp32)
            a(8),
            a(36040),
            a(9226240),
            f(9226240),
            f(36040),
            f(8),
            f(32768),
            f(32768),
            f(8),
            f(32768),
            // orig, sorted
            f(32768),
            f(32768),
        ];
        assert_eq!(entries(&rt, at), expected);
    }
}
