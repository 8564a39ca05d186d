//! Shape, index and mask ops: `torch.cat`, `torch.arange`, comparisons and
//! boolean masks (`gt`, `le`, `&`, ...), `torch.where`, `cumsum`,
//! `F.pad(value=)` (`constant_pad_nd`), Python slicing (`x[..., a:b]`) and
//! `alias`, with the allocations their CUDA kernels make (one output each,
//! laid out as the kernel lays it out) and what their autograd nodes save
//! (`derivatives.yaml`, PyTorch 2.11): `CatBackward0`, `AliasBackward0`,
//! `ConstantPadNdBackward0` save no tensor; `WhereBackward0` saves the
//! condition; comparisons and bitwise ops are not differentiable (no node).

use crate::autograd::{Backward, Pending};
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{shape_err, EngineError, Result};
use crate::ops::elementwise::Scalar;
use crate::ops::{iter_output, promote};
use crate::runtime::{Category, Runtime};
use crate::tensor::Tensor;

impl Runtime {
    /// `torch.arange(end, dtype=dtype, device=device)` (`arange.start_out`
    /// resizes a fresh output to `end` elements; the default dtype of an
    /// integer `end` is int64).
    pub fn arange(&self, end: i64, dtype: DType, device: Device) -> Result<Tensor> {
        if end < 0 {
            return Err(shape_err(
                "arange",
                format!("upper bound and larger bound inconsistent with step sign (end = {end})"),
            ));
        }
        self.empty_op(&[end], dtype, device, "arange", Category::Output)
    }
}

/// `cat_should_skip_tensor`: legacy 1-D empty tensors take no part in the
/// shape check of `torch.cat` (`DynamicLayer` starts from `torch.tensor([])`).
fn cat_skips(t: &Tensor) -> bool {
    t.dim() == 1 && t.numel() == 0
}

/// A comparison kernel (`gt`, `le`, ...): TensorIterator output of dtype bool.
fn compare(op: &'static str, inputs: &[&Tensor]) -> Result<Tensor> {
    iter_output(op, inputs, DType::Bool, Category::Output)
}

impl Tensor {
    /// `torch.cat(tensors, dim)`: one contiguous output (all inputs here
    /// suggest the contiguous memory format), of the promoted dtype; 1-D
    /// empty inputs are skipped (legacy behaviour). `CatBackward0` saves
    /// only the inputs' sizes; its backward narrows the gradient (views).
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let Some(first) = tensors.iter().find(|t| !cat_skips(t)) else {
            // every input is a 1-D empty tensor: the result is one too
            let t = tensors
                .first()
                .ok_or_else(|| shape_err("cat", "expected a non-empty list of Tensors"))?;
            let mut dt = t.dtype();
            for x in &tensors[1..] {
                dt = promote(dt, x.dtype());
            }
            return t
                .rt()
                .empty_op(&[0], dt, t.device(), "cat", Category::Output);
        };
        let d = first.try_wrap_dim("cat", dim)?;
        let mut shape = first.dims();
        let mut total = 0i64;
        let mut dtype = tensors[0].dtype();
        for t in tensors {
            dtype = promote(dtype, t.dtype());
            if cat_skips(t) {
                continue;
            }
            if t.dim() != first.dim() {
                return Err(shape_err(
                    "cat",
                    format!(
                        "tensors must have the same number of dimensions: got {:?} and {:?}",
                        first.sizes(),
                        t.sizes()
                    ),
                ));
            }
            for (i, (&a, &b)) in first.sizes().iter().zip(t.sizes()).enumerate() {
                if i != d && a != b {
                    return Err(shape_err(
                        "cat",
                        format!(
                            "sizes of tensors must match except in dimension {d}: got {:?} and {:?}",
                            first.sizes(),
                            t.sizes()
                        ),
                    ));
                }
            }
            if t.device() != first.device() {
                return Err(EngineError::Mismatch {
                    op: "cat",
                    detail: format!(
                        "expected all tensors on {}, got {}",
                        first.device(),
                        t.device()
                    ),
                });
            }
            total += t.sizes()[d];
        }
        shape.as_mut_slice()[d] = total;
        let inputs: Vec<Option<&Tensor>> = tensors.iter().map(|t| Some(*t)).collect();
        let pending = Pending::begin(first.rt(), &inputs);
        let out = first
            .rt()
            .empty_op(&shape, dtype, first.device(), "cat", Category::Output)?;
        if let Some(p) = pending {
            let sizes = tensors.iter().map(|t| t.dims()).collect();
            p.finish(Backward::Cat { dim: d, sizes }, &[&out]);
        }
        Ok(out)
    }

    /// Python slicing `t[..., start:end]` on `dim` (negative bounds count
    /// from the end and are clamped, as `applySlicing`). A full slice
    /// returns `self` itself (`applySlice`'s shortcut), anything else a
    /// `slice` view (`SliceBackward0`).
    ///
    /// # Panics
    /// When a dim is out of range, with PyTorch's message (these views take
    /// the caller's constants; the ops that return a `Result` return it as
    /// an error).
    pub fn slice(&self, dim: i64, start: Option<i64>, end: Option<i64>) -> Tensor {
        let d = self.wrap_dim(dim);
        let len = self.sizes()[d];
        let wrap = |i: i64| -> i64 {
            let i = if i < 0 { i + len } else { i };
            i.clamp(0, len)
        };
        let s = start.map_or(0, wrap);
        let e = end.map_or(len, wrap).max(s);
        if s == 0 && e == len {
            return self.clone();
        }
        self.narrow(d as i64, s, e - s)
    }

    /// `torch.ops.aten.alias(t)`: a view of the whole tensor; what
    /// `t[:, 0:, :]` returns (`THPVariable_getitem` aliases a result that is
    /// `self`). `AliasBackward0` passes the gradient through.
    pub fn alias(&self) -> Tensor {
        let out = self.alias_with(self.dims(), Dims::new(self.strides()), self.0.offset);
        if let Some(p) = Pending::begin(self.rt(), &[Some(self)]) {
            p.finish(Backward::Alias, &[&out]);
        }
        self.rt().count_op();
        out
    }

    /// `a > b` (broadcast; bool output, not differentiable).
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        compare("gt", &[self, other])
    }
    /// `a >= b`
    pub fn ge(&self, other: &Tensor) -> Result<Tensor> {
        compare("ge", &[self, other])
    }
    /// `a < b`
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        compare("lt", &[self, other])
    }
    /// `a <= b`
    pub fn le(&self, other: &Tensor) -> Result<Tensor> {
        compare("le", &[self, other])
    }
    /// `a == b`
    pub fn eq_tensor(&self, other: &Tensor) -> Result<Tensor> {
        compare("eq", &[self, other])
    }
    /// `a != b`
    pub fn ne_tensor(&self, other: &Tensor) -> Result<Tensor> {
        compare("ne", &[self, other])
    }
    /// `a == s` for a Python number `s` (a CPU scalar: no device memory).
    pub fn eq_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("eq", &[self])
    }
    /// `a != s`
    pub fn ne_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("ne", &[self])
    }
    /// `a > s`
    pub fn gt_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("gt", &[self])
    }
    /// `a >= s`
    pub fn ge_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("ge", &[self])
    }
    /// `a < s`
    pub fn lt_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("lt", &[self])
    }
    /// `a <= s`
    pub fn le_scalar(&self, _s: Scalar) -> Result<Tensor> {
        compare("le", &[self])
    }

    /// `a & b` (`bitwise_and`; for bool masks a bool output).
    pub fn bitwise_and(&self, other: &Tensor) -> Result<Tensor> {
        let dt = promote(self.dtype(), other.dtype());
        iter_output("bitwise_and", &[self, other], dt, Category::Output)
    }
    /// `a | b` (`bitwise_or`).
    pub fn bitwise_or(&self, other: &Tensor) -> Result<Tensor> {
        let dt = promote(self.dtype(), other.dtype());
        iter_output("bitwise_or", &[self, other], dt, Category::Output)
    }
    /// `~a` / `torch.logical_not(a)` on a bool mask.
    pub fn logical_not(&self) -> Result<Tensor> {
        iter_output("logical_not", &[self], DType::Bool, Category::Output)
    }

    /// `torch.isin(t, test)`: a bool like `t` (`isin_default_kernel_gpu`
    /// for the few test elements generation asks about: a TensorIterator
    /// output, the operands already of one dtype).
    pub fn isin(&self, test: &Tensor) -> Result<Tensor> {
        let _ = test;
        iter_output("isin", &[self], DType::Bool, Category::Output)
    }

    /// `t[indices]` with int64 index tensors (`index.Tensor`,
    /// `AdvancedIndex` in TensorAdvancedIndexing.cpp): the indices broadcast
    /// to one shape, which replaces the indexed dims where they are adjacent
    /// (else it leads). On CUDA, two or more indices whose strides differ
    /// once broadcast are each made contiguous at that shape before the
    /// output is allocated, and die with the kernel (a GPU record of HF's
    /// padding-mask construction, as `python/vramscope/_kernels/index.py`'s
    /// `_index`). One int64 index on dim 0 of a tensor that needs a gradient
    /// records `IndexBackward0` ([`index_backward`]); other indexings record
    /// no node.
    pub fn index(&self, indices: &[Option<&Tensor>]) -> Result<Tensor> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            let [Some(idx)] = indices else {
                return Err(EngineError::Unsupported {
                    what: "indexing with autograd other than one index on dim 0".into(),
                });
            };
            let sizes = self.sizes().to_vec();
            let rt = self.rt().clone();
            return crate::function::apply(
                &rt,
                "IndexBackward0",
                &[self],
                |ctx, x| {
                    ctx.save_for_backward(&[idx]);
                    x[0].index(&[Some(idx)])
                },
                move |saved, grads| {
                    let Some(g) = grads.first().cloned().flatten() else {
                        return Ok(vec![None]);
                    };
                    Ok(vec![Some(index_backward(&g, &saved[0], &sizes)?)])
                },
            );
        }
        if indices.len() > self.dim() {
            return Err(shape_err(
                "index",
                format!(
                    "too many indices for tensor of dimension {} (got {})",
                    self.dim(),
                    indices.len()
                ),
            ));
        }
        let defined: Vec<(usize, &Tensor)> = indices
            .iter()
            .enumerate()
            .filter_map(|(d, i)| i.map(|t| (d, t)))
            .collect();
        let Some(&(first, _)) = defined.first() else {
            return Ok(self.clone());
        };
        let mut shape = Dims::new(&[]);
        for (_, t) in &defined {
            if t.dtype() != DType::I64 {
                return Err(EngineError::Unsupported {
                    what: format!("indexing with a {} tensor (int64 is modelled)", t.dtype()),
                });
            }
            shape = crate::dims::broadcast_shapes(&shape, t.sizes()).ok_or_else(|| {
                shape_err(
                    "index",
                    format!(
                        "shape mismatch: indexing tensors could not be broadcast together ({:?}, {:?})",
                        shape,
                        t.sizes()
                    ),
                )
            })?;
        }
        let last = defined.last().map(|&(d, _)| d).unwrap_or(first);
        let adjacent = defined.len() == last - first + 1;
        let rest = |range: std::ops::Range<usize>| -> Vec<i64> {
            range
                .filter(|d| indices.get(*d).is_none_or(|i| i.is_none()))
                .map(|d| self.sizes()[d])
                .collect()
        };
        let out_sizes: Vec<i64> = if adjacent {
            let mut v = self.sizes()[..first].to_vec();
            v.extend_from_slice(&shape);
            v.extend_from_slice(&self.sizes()[last + 1..]);
            v
        } else {
            let mut v = shape.to_vec();
            v.extend(rest(0..self.dim()));
            v
        };
        // strides of each index broadcast to `shape`, over the dims of size > 1
        let expanded = |t: &Tensor| -> Vec<i64> {
            let pad = shape.len() - t.dim();
            (0..shape.len())
                .filter(|&k| shape[k] > 1)
                .map(|k| {
                    if k < pad || t.sizes()[k - pad] == 1 {
                        0
                    } else {
                        t.strides()[k - pad]
                    }
                })
                .collect()
        };
        let first_strides = expanded(defined[0].1);
        let copies =
            if defined.len() > 1 && defined.iter().any(|(_, t)| expanded(t) != first_strides) {
                let n: i64 = shape.iter().product();
                let mut v = Vec::with_capacity(defined.len());
                for _ in &defined {
                    v.push(self.rt().empty_op(
                        &[n],
                        DType::I64,
                        self.device(),
                        "index",
                        Category::Temporary,
                    )?);
                }
                v
            } else {
                Vec::new()
            };
        let out = self.rt().empty_op(
            &out_sizes,
            self.dtype(),
            self.device(),
            "index",
            Category::Output,
        )?;
        drop(copies);
        Ok(out)
    }

    /// `t.masked_fill(mask, v)` (out of place): a contiguous clone of the
    /// broadcast `t`, filled in place (`masked_fill` in TensorAdvancedIndexing.cpp).
    pub fn masked_fill(&self, mask: &Tensor) -> Result<Tensor> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            // `MaskedFillBackward0` saves the mask: `grad.masked_fill(mask, 0)`
            let rt = self.rt().clone();
            return crate::function::apply(
                &rt,
                "MaskedFillBackward0",
                &[self],
                |ctx, x| {
                    ctx.save_for_backward(&[mask]);
                    x[0].masked_fill(mask)
                },
                |saved, grads| {
                    let Some(g) = grads.first().cloned().flatten() else {
                        return Ok(vec![None]);
                    };
                    Ok(vec![Some(g.masked_fill(&saved[0])?)])
                },
            );
        }
        self.rt().empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            "masked_fill",
            Category::Output,
        )
    }

    /// `t.new_ones(sizes, dtype=)` / `new_zeros` / `new_full`: a fresh
    /// contiguous tensor on `t`'s device.
    pub fn new_full(&self, sizes: &[i64], dtype: DType) -> Result<Tensor> {
        self.rt()
            .empty_op(sizes, dtype, self.device(), "full", Category::Output)
    }

    /// `torch.where(condition, self, other)`: a TensorIterator output of the
    /// broadcast shape and promoted dtype. `WhereBackward0` saves the condition.
    pub fn where_(condition: &Tensor, input: &Tensor, other: &Tensor) -> Result<Tensor> {
        let mut pending = Pending::begin(input.rt(), &[Some(input), Some(other)]);
        let slot = pending.as_mut().map(|p| p.save(condition));
        let dt = promote(input.dtype(), other.dtype());
        let out = iter_output("where", &[condition, input, other], dt, Category::Output)?;
        if let (Some(p), Some(condition)) = (pending, slot) {
            p.finish(Backward::Where { condition }, &[&out]);
        }
        Ok(out)
    }

    /// `torch.where(condition, self, s)` for a Python number `s`
    /// (`where.ScalarOther`). `WhereBackward1` saves the condition.
    pub fn where_scalar(condition: &Tensor, input: &Tensor, _s: Scalar) -> Result<Tensor> {
        let mut pending = Pending::begin(input.rt(), &[Some(input)]);
        let slot = pending.as_mut().map(|p| p.save(condition));
        let out = iter_output(
            "where",
            &[condition, input],
            input.dtype(),
            Category::Output,
        )?;
        if let (Some(p), Some(condition)) = (pending, slot) {
            p.finish(Backward::Where { condition }, &[&out]);
        }
        Ok(out)
    }

    /// `t.cumsum(dim)` as `cumsum_out` (`impl_func_cum_ops`) runs it: the
    /// output, int64 for bool and integer inputs (`cumsum` promotes them),
    /// else the input's dtype; a 0-dim input is copied into it and an empty
    /// one zeroed, with nothing else; otherwise the input cast to that dtype
    /// when it differs (`self.to(result.scalar_type())`, freed when the
    /// kernel returns), and on CUDA `scan_dim` scans a contiguous input (a
    /// copy if it is not). When its numel is the scanned dim's size (a 1-D
    /// tensor, a batch of one) that takes CUB's temporary storage for the
    /// call (`cuda::cub::inclusive_scan`,
    /// `ops::cub::inclusive_scan_bytes`); where that size was not
    /// measured (other element sizes, other GPUs, more than 2^30 items,
    /// which PyTorch scans in chunks) it is taken as 0 bytes and noted
    /// (`EventLog::unmeasured`). Other shapes scan in a kernel of PyTorch's
    /// own, with no scratch. Not modelled under autograd (an error if a
    /// gradient would be recorded).
    pub fn cumsum(&self, dim: i64) -> Result<Tensor> {
        self.cumsum_dtype(dim, None)
    }

    /// `torch.cumsum(t, dim, dtype=dtype)`: as [`Tensor::cumsum`], the
    /// result (and the input's cast, where it differs) in `dtype`.
    pub fn cumsum_dtype(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        const OP: &str = "cumsum";
        let d = self.try_wrap_dim(OP, dim)?;
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: "cumsum with autograd".into(),
            });
        }
        let dt = match dtype {
            Some(dt) => dt,
            None if self.dtype().is_floating() => self.dtype(),
            None => DType::I64,
        };
        let rt = self.rt();
        let out = rt.empty_op(self.sizes(), dt, self.device(), OP, Category::Output)?;
        let n = self.numel();
        if self.dim() == 0 || n == 0 {
            return Ok(out);
        }
        let cast = if dt == self.dtype() {
            None
        } else {
            Some(self.to_dtype(dt)?)
        };
        let input = cast.as_ref().unwrap_or(self);
        if self.device() == Device::Cuda {
            let copy = if input.is_contiguous() {
                None
            } else {
                Some(input.contiguous()?)
            };
            // `at::cuda::cub::inclusive_scan`'s `max_cub_size` (ATen
            // `cuda/cub.cuh`: `int max / 2 + 1`, 2^30): longer scans go in
            // chunks, with a carry buffer between them
            const MAX_CUB_SIZE: i64 = 1 << 30;
            if n == self.sizes()[d] {
                let policies = rt.profile().cub_policies;
                match crate::ops::cub::inclusive_scan_bytes(policies, n as u64, dt.size()) {
                    Ok(bytes) if n <= MAX_CUB_SIZE => {
                        let rule = crate::scratch::ScratchRule::InclusiveScan {
                            n,
                            t_bytes: dt.size(),
                        };
                        drop(rt.scratch(bytes, rule, OP)?);
                    }
                    _ => rt.note_unmeasured(format!(
                        "CUB's storage for the cumsum of {n} {dt} items is not measured for {}: taken as 0 bytes",
                        rt.profile().name
                    )),
                }
            }
            drop(copy);
        }
        drop(cast);
        Ok(out)
    }

    /// `t.all()`: a 0-dim bool (the reduction needs no scratch for the
    /// masks the models build).
    pub fn all(&self) -> Result<Tensor> {
        self.rt()
            .empty_op(&[], DType::Bool, self.device(), "all", Category::Output)
    }

    /// `t.roll(shift, dims=dim)` (`roll_cuda`, one dim): a contiguous copy
    /// first when `t` is not contiguous, then `empty_like` of it
    /// (`LEGACY_CONTIGUOUS_MEMORY_FORMAT`) for the rolled output; the copy
    /// dies at return. Not modelled under autograd.
    pub fn roll(&self, _shift: i64, dim: i64) -> Result<Tensor> {
        const OP: &str = "roll";
        self.try_wrap_dim(OP, dim)?;
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: "roll with autograd".into(),
            });
        }
        let copy = if self.is_contiguous() {
            None
        } else {
            Some(self.contiguous()?)
        };
        let input = copy.as_ref().unwrap_or(self);
        let out = self.rt().empty_op(
            input.sizes(),
            input.dtype(),
            input.device(),
            OP,
            Category::Output,
        )?;
        drop(copy);
        self.rt().count_op();
        Ok(out)
    }

    /// `F.pad(t, pad, value=v)` (`constant_pad_nd`): a fresh output of the
    /// padded shape (`empty` + `fill_` + a copy into its interior), laid out
    /// contiguously. `pad` is `(last_lo, last_hi, prev_lo, prev_hi, ...)`.
    /// `ConstantPadNdBackward0` saves no tensor.
    pub fn constant_pad(&self, pad: &[i64]) -> Result<Tensor> {
        if !pad.len().is_multiple_of(2) || pad.len() / 2 > self.dim() {
            return Err(shape_err(
                "constant_pad_nd",
                format!(
                    "padding {pad:?} must have an even length of at most twice the dims of {:?}",
                    self.sizes()
                ),
            ));
        }
        let mut shape = self.dims();
        let n = self.dim();
        for (i, lohi) in pad.chunks(2).enumerate() {
            let d = n - 1 - i;
            let s = shape[d] + lohi[0] + lohi[1];
            if s < 0 {
                return Err(shape_err(
                    "constant_pad_nd",
                    format!(
                        "padding {pad:?} makes dimension {d} of {:?} negative",
                        self.sizes()
                    ),
                ));
            }
            shape.as_mut_slice()[d] = s;
        }
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let out = self.rt().empty_op(
            &shape,
            self.dtype(),
            self.device(),
            "constant_pad_nd",
            Category::Output,
        )?;
        if let Some(p) = pending {
            p.finish(Backward::ConstantPad { pad: pad.to_vec() }, &[&out]);
        }
        Ok(out)
    }
}

/// `cat_tensors_backward`: each input's gradient is a narrow of the
/// incoming one (a 1-D empty input gets `zeros({0})`, no memory).
pub(crate) fn cat_backward(
    grad: &Tensor,
    dim: usize,
    sizes: &[Dims],
    needs: impl Fn(usize) -> bool,
) -> Result<Vec<Option<Tensor>>> {
    let mut out = vec![None; sizes.len()];
    let mut offset = 0i64;
    for (i, s) in sizes.iter().enumerate() {
        if s.len() == 1 && s[0] == 0 {
            if needs(i) {
                out[i] = Some(grad.rt().empty_op(
                    &[0],
                    grad.dtype(),
                    grad.device(),
                    "zeros",
                    Category::Gradient,
                )?);
            }
            continue;
        }
        let n = s[dim];
        if needs(i) {
            out[i] = Some(grad.narrow(dim as i64, offset, n));
        }
        offset += n;
    }
    Ok(out)
}

/// `where(condition, grad, 0)` / `where(condition, 0, grad)`: one output of
/// the broadcast shape in the gradient's dtype.
pub(crate) fn where_backward(grad: &Tensor, condition: &Tensor) -> Result<Tensor> {
    iter_output(
        "where",
        &[condition, grad],
        grad.dtype(),
        Category::Gradient,
    )
}

/// `constant_pad_nd_backward(grad, pad)` = `constant_pad_nd(grad, -pad)`:
/// all pads non-positive, so a narrowed clone of the gradient.
pub(crate) fn constant_pad_backward(grad: &Tensor, pad: &[i64]) -> Result<Tensor> {
    let mut shape = grad.dims();
    let n = grad.dim();
    for (i, lohi) in pad.chunks(2).enumerate() {
        let d = n - 1 - i;
        shape.as_mut_slice()[d] -= lohi[0] + lohi[1];
    }
    grad.rt().empty_op(
        &shape,
        grad.dtype(),
        grad.device(),
        "constant_pad_nd",
        Category::Gradient,
    )
}

/// `index_backward(grad.new_zeros(self_sizes), indices, grad)` for one int64
/// index on dim 0: `_index_put_impl_(zeros, indices, grad, accumulate=True,
/// unsafe=True)` through `index_put_with_sort_kernel` (cuda/Indexing.cu):
/// the linear index (`wrapIndexOnce`'s remainder, then the product by the
/// stride, the first kept), the gradient made contiguous, then
/// `sorted_indices`, `orig_indices` and an `arange` beside
/// `cuda::cub::radix_sort_pairs` on the bits of the largest slice index. As
/// the Python capture's `_index_put_sorted` (the H200 sweep, blind7/g05).
pub(crate) fn index_backward(grad: &Tensor, index: &Tensor, self_sizes: &[i64]) -> Result<Tensor> {
    const OP: &str = "index_put_";
    let rt = grad.rt().clone();
    let zeros = rt.empty_op(
        self_sizes,
        grad.dtype(),
        grad.device(),
        "zeros",
        Category::Gradient,
    )?;
    let n = index.numel();
    if n == 0 || grad.device() != Device::Cuda {
        return Ok(zeros);
    }
    let tmp = |len: i64| rt.empty_op(&[len], DType::I64, grad.device(), OP, Category::Temporary);
    let wrapped = tmp(n)?;
    let linear = tmp(n)?;
    drop(wrapped);
    let value_copy = if grad.is_contiguous() {
        None
    } else {
        Some(rt.empty_op(
            grad.sizes(),
            grad.dtype(),
            grad.device(),
            OP,
            Category::Temporary,
        )?)
    };
    let sorted = tmp(n)?;
    let orig = tmp(n)?;
    let range = tmp(n)?;
    let rows = self_sizes.first().copied().unwrap_or(1);
    // the largest slice index: (rows - 1), on at least one bit (`get_num_bits`)
    let end_bit = (64 - ((rows - 1).max(0) as u64).leading_zeros()).max(1) as u64;
    let rule = crate::scratch::ScratchRule::RadixSortPairs {
        n,
        key_bytes: 8,
        value_bytes: 8,
        end_bit,
    };
    match rule.bytes(&rt.profile()) {
        Some(bytes) => drop(rt.scratch(bytes, rule, OP)?),
        None => rt.note_unmeasured(format!(
            "CUB's storage for the radix sort of {n} indices is not measured for {}: taken as 0 bytes",
            rt.profile().name
        )),
    }
    drop(range);
    drop(orig);
    drop(sorted);
    drop(value_copy);
    drop(linear);
    Ok(zeros)
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Runtime};

    /// `t[:, idx]` allocates its output only; `t[b_idx, kv_idx]` with
    /// indices of different broadcast strides first makes each index
    /// contiguous at the broadcast shape (int64), freed after the output.
    #[test]
    fn index_gathers_and_copies_indices_of_different_strides() {
        let rt = Runtime::default();
        let pm = rt.empty(&[3, 40], DType::Bool, Device::Cuda).unwrap();
        let idx = rt.arange(16, DType::I64, Device::Cuda).unwrap();
        let before = rt.memory_allocated();
        let cut = pm.index(&[None, Some(&idx)]).unwrap();
        assert_eq!(cut.sizes(), &[3, 16]);
        assert_eq!(rt.memory_allocated() - before, 512);
        let b = rt.arange(3, DType::I64, Device::Cuda).unwrap();
        let b = b
            .unsqueeze(1)
            .unwrap()
            .unsqueeze(1)
            .unwrap()
            .unsqueeze(1)
            .unwrap();
        let kv = idx
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        rt.reset_peak_memory_stats();
        let base = rt.memory_allocated();
        let out = cut.index(&[Some(&b), Some(&kv)]).unwrap();
        assert_eq!(out.sizes(), &[3, 1, 1, 16]);
        assert_eq!(rt.memory_allocated() - base, 512);
        // two int64 copies of 48 elements (512 bytes each) and the output
        assert_eq!(rt.max_memory_allocated() - base, 3 * 512);
        assert!(pm.index(&[Some(&pm)]).is_err());
    }

    /// `cumsum` of a bool mask as `cumsum_out` runs it: the int64 output,
    /// the int64 copy of the input, and, for a batch of one, CUB's 1,279
    /// bytes (rounded to 1,536) while both are live; a 0-dim input gets its
    /// output only. fp16 scans, never measured, take no storage.
    #[test]
    fn cumsum_allocates_as_cumsum_out() {
        let rt = Runtime::default();
        for (rows, cub) in [(1, 1536), (4, 0)] {
            let mask = rt.empty(&[rows, 1536], DType::Bool, Device::Cuda).unwrap();
            let before = rt.memory_allocated();
            rt.reset_peak_memory_stats();
            let out = mask.cumsum(-1).unwrap();
            let bytes = rows * 1536 * 8;
            assert_eq!(out.dtype(), DType::I64);
            assert_eq!(rt.memory_allocated() - before, bytes);
            assert_eq!(
                rt.max_memory_allocated() - before,
                2 * bytes + cub,
                "{rows} rows"
            );
        }
        let scalar = rt.empty(&[], DType::I32, Device::Cuda).unwrap();
        let before = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let out = scalar.cumsum(0).unwrap();
        assert_eq!(out.sizes(), &[] as &[i64]);
        assert_eq!(rt.max_memory_allocated() - before, 512);
        let half = rt.empty(&[100], DType::F16, Device::Cuda).unwrap();
        assert!(half.cumsum(0).is_ok());
    }

    #[test]
    fn cat_skips_legacy_empty_and_copies_the_rest() {
        let rt = Runtime::default();
        let empty = rt.empty(&[0], DType::BF16, Device::Cuda).unwrap();
        let k = rt
            .empty(&[4, 2, 512, 64], DType::BF16, Device::Cuda)
            .unwrap();
        k.requires_grad_(true).unwrap();
        let before = rt.memory_allocated();
        let c = crate::Tensor::cat(&[&empty, &k], -2).unwrap();
        assert_eq!(c.sizes(), &[4, 2, 512, 64]);
        assert!(!c.shares_storage(&k), "cat always copies");
        // 4*2*512*64*2 = 524288 bytes, the DynamicLayer's first update
        assert_eq!(rt.memory_allocated() - before, 524_288);
        let n = c.grad_fn().unwrap();
        assert_eq!((n.name(), n.num_saved()), ("CatBackward0", 0));
    }

    #[test]
    fn cat_of_a_transposed_view_is_contiguous() {
        let rt = Runtime::default();
        let f = rt.empty(&[1, 32, 512], DType::F32, Device::Cuda).unwrap();
        let ft = f.transpose(1, 2);
        let e = crate::Tensor::cat(&[&ft, &ft], -1).unwrap();
        assert_eq!(e.sizes(), &[1, 512, 64]);
        assert!(e.is_contiguous());
        assert_eq!(e.storage_nbytes(), 131_072);
    }

    #[test]
    fn comparisons_make_bool_masks_of_the_broadcast_shape() {
        let rt = Runtime::default();
        let q = rt.arange(512, DType::I64, Device::Cuda).unwrap();
        let kv = rt.arange(512, DType::I64, Device::Cuda).unwrap();
        let qi = q
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(-1)
            .unwrap();
        let ki = kv
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let m = ki.le(&qi).unwrap();
        assert_eq!(
            (m.sizes(), m.dtype()),
            (&[1i64, 1, 512, 512][..], DType::Bool)
        );
        assert_eq!(m.storage_nbytes(), 262_144);
        assert_eq!(q.storage_nbytes(), 4096);
    }

    #[test]
    fn full_slices_are_the_tensor_itself() {
        let rt = Runtime::default();
        let x = rt.empty(&[4, 8, 16], DType::F32, Device::Cuda).unwrap();
        assert!(x.slice(1, Some(0), None).same(&x));
        assert!(x.slice(1, Some(-4095), None).same(&x));
        let h = x.slice(-1, None, Some(8));
        assert_eq!(h.sizes(), &[4, 8, 8]);
        assert!(h.shares_storage(&x) && !h.same(&x));
        let t = x.slice(-1, Some(8), None);
        assert_eq!(t.sizes(), &[4, 8, 8]);
    }

    #[test]
    fn pad_allocates_the_padded_shape() {
        let rt = Runtime::default();
        let l = rt.empty(&[4, 512], DType::I64, Device::Cuda).unwrap();
        let p = l.constant_pad(&[0, 1]).unwrap();
        assert_eq!(p.sizes(), &[4, 513]);
        assert_eq!(p.storage_nbytes(), 16_416);
        assert!(l.constant_pad(&[0, 1, 0, 1, 0, 1]).is_err());
    }
}
