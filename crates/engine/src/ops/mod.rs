//! Forward ops: each allocates what its ATen kernel allocates, in the same
//! order, and records the autograd node (with its saved tensors) that
//! `VariableType` would record.

// attention (SDPA): F.scaled_dot_product_attention and its backends
pub(crate) mod attention;
// conv2d through cuDNN
pub(crate) mod conv;
// CUB temporary storage (sort, unique, scan) of CUB_WRAPPER calls
pub(crate) mod cub;
pub(crate) mod elementwise;
pub(crate) mod linalg;
pub(crate) mod nn;
pub(crate) mod reduce;
// cat, arange, comparisons, masks, where, cumsum, pad
pub(crate) mod shape;
// topk, sort, histc, index_put_, _grouped_mm: a mixture-of-experts layer's routing
pub(crate) mod sorting;
pub(crate) mod view;

pub use elementwise::Scalar;

use crate::dims::{broadcast_shapes, infer_dense_strides, iterator_output_strides, Dims};
use crate::dtype::DType;
use crate::error::{shape_err, EngineError, Result};
use crate::runtime::{Category, Runtime};
use crate::tensor::Tensor;

impl Tensor {
    pub(crate) fn rt(&self) -> &Runtime {
        self.runtime()
    }
}

/// The addresses whose frees `rt` requested from trace entry `from` on, in order (tests of the
/// order in which backward nodes release their saved tensors).
#[cfg(test)]
pub(crate) fn freed_since(rt: &Runtime, from: usize) -> Vec<u64> {
    rt.trace()[from..]
        .iter()
        .filter(|e| e.action.as_str() == "free_requested")
        .map(|e| e.addr)
        .collect()
}

/// `at::result_type` for two tensors (the cases the twin needs).
pub(crate) fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a, b) {
        (F64, _) | (_, F64) => F64,
        (F32, _) | (_, F32) => F32,
        (F16, BF16) | (BF16, F16) => F32,
        (F16, _) | (_, F16) => F16,
        (BF16, _) | (_, BF16) => BF16,
        (I64, _) | (_, I64) => I64,
        (I32, _) | (_, I32) => I32,
        (U8, _) | (_, U8) => U8,
        _ => a,
    }
}

/// The output a TensorIterator kernel allocates for `inputs`: broadcast
/// shape, layout following the inputs (`compute_strides`).
pub(crate) fn iter_output(
    op: &'static str,
    inputs: &[&Tensor],
    dtype: DType,
    cat: Category,
) -> Result<Tensor> {
    let mut shape: Dims = inputs[0].dims();
    for t in &inputs[1..] {
        shape = broadcast_shapes(&shape, t.sizes()).ok_or_else(|| {
            shape_err(
                op,
                format!("cannot broadcast {:?} with {:?}", shape, t.sizes()),
            )
        })?;
    }
    let ins: Vec<(&[i64], &[i64])> = inputs.iter().map(|t| (t.sizes(), t.strides())).collect();
    let strides = iterator_output_strides(&shape, &ins);
    let dev = inputs[0].device();
    for t in &inputs[1..] {
        if t.device() != dev && t.dim() > 0 {
            return Err(EngineError::Mismatch {
                op,
                detail: format!(
                    "expected all tensors on the same device, got {dev} and {}",
                    t.device()
                ),
            });
        }
    }
    inputs[0]
        .rt()
        .empty_strided_op(&shape, &strides, dtype, dev, op, cat)
}

/// `at::empty_like(t)` with `preserve_format` (`empty_like`,
/// ATen/native/TensorFactories.cpp): same strides when `t` is
/// non-overlapping and dense, else (a strided tensor) the dense strides of
/// `infer_dense_strides`, which keep `t`'s stride order.
pub(crate) fn empty_like(
    t: &Tensor,
    dtype: DType,
    op: &'static str,
    cat: Category,
) -> Result<Tensor> {
    t.rt()
        .empty_strided_op(t.sizes(), &preserve_strides(t), dtype, t.device(), op, cat)
}

/// The strides `MemoryFormat::Preserve` gives a new tensor like `t`
/// (`empty_like` in TensorFactories.cpp, `_to_copy` in
/// TensorConversions.cpp): `t`'s own when non-overlapping and dense, else
/// `at::infer_dense_strides(t.sizes(), t.strides())`.
pub(crate) fn preserve_strides(t: &Tensor) -> Dims {
    if t.is_non_overlapping_and_dense() {
        Dims::new(t.strides())
    } else {
        infer_dense_strides(t.sizes(), t.strides())
    }
}

impl Tensor {
    /// `torch.empty_like(t)`.
    pub fn empty_like(&self) -> Result<Tensor> {
        empty_like(self, self.dtype(), "empty_like", Category::Output)
    }
    /// `torch.zeros_like(t)`.
    pub fn zeros_like(&self) -> Result<Tensor> {
        empty_like(self, self.dtype(), "zeros_like", Category::Output)
    }
    /// `torch.ones_like(t)`.
    pub fn ones_like(&self) -> Result<Tensor> {
        empty_like(self, self.dtype(), "ones_like", Category::Output)
    }
    /// `t.to(device)` / `t.cuda()`: a copy on the other device (`_to_copy`
    /// allocates with `empty_strided` of the `preserve_strides`), or
    /// `self` when already there.
    pub fn to_device(&self, device: crate::dtype::Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let out = self.rt().empty_strided_op(
            self.sizes(),
            &preserve_strides(self),
            self.dtype(),
            device,
            "_to_copy",
            Category::Output,
        )?;
        if let Some(mut p) = crate::autograd::Pending::begin(self.rt(), &[Some(self)]) {
            let _ = &mut p;
            p.finish(
                crate::autograd::Backward::ToCopy {
                    device: self.device(),
                    dtype: self.dtype(),
                },
                &[&out],
            );
        }
        Ok(out)
    }
    /// `t.to(dtype)`: a converted copy, or `self` when already of that dtype.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        let out = empty_like(self, dtype, "_to_copy", Category::Output)?;
        if let Some(p) = crate::autograd::Pending::begin(self.rt(), &[Some(self)]) {
            p.finish(
                crate::autograd::Backward::ToCopy {
                    device: self.device(),
                    dtype: self.dtype(),
                },
                &[&out],
            );
        }
        Ok(out)
    }
}
