//! Pointwise ops (TensorIterator kernels): one output allocation each, laid
//! out as `TensorIterator` lays it out; the saved tensors of
//! `derivatives.yaml`.

use crate::autograd::{Backward, Pending};
use crate::error::{EngineError, Result};
use crate::ops::{iter_output, promote};
use crate::runtime::Category;
use crate::tensor::Tensor;

/// A Python number operand (`x * 2`): PyTorch wraps it as a 0-dim CPU
/// tensor, so it never takes device memory and never requires grad.
pub type Scalar = f64;

/// Unary pointwise ops, with what their backward saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unary {
    /// `neg`: `self: -grad` (saves nothing)
    Neg,
    /// `exp`: `self: grad * result.conj()` (saves result)
    Exp,
    /// `sigmoid`: `self: sigmoid_backward(grad, result)` (saves result)
    Sigmoid,
    /// `tanh`: `self: tanh_backward(grad, result)` (saves result)
    Tanh,
    /// `relu`: `self: threshold_backward(grad, result, 0)` (saves result)
    Relu,
    /// `gelu`: `self: gelu_backward(grad, self, approximate)` (saves self)
    Gelu,
    /// `silu`: `self: GradMode::is_enabled() ? infinitely_differentiable_silu_backward(grad, self) : silu_backward(grad, self)` (saves self)
    Silu,
    /// `sqrt`: `self: grad / (2 * result.conj())` (saves result)
    Sqrt,
    /// `reciprocal`: `self: -grad * (result * result).conj()` (saves result)
    Reciprocal,
}

impl Unary {
    fn kernel_name(self) -> &'static str {
        match self {
            Unary::Neg => "neg",
            Unary::Exp => "exp",
            Unary::Sigmoid => "sigmoid",
            Unary::Tanh => "tanh",
            Unary::Relu => "clamp_min",
            Unary::Gelu => "gelu",
            Unary::Silu => "silu",
            Unary::Sqrt => "sqrt",
            Unary::Reciprocal => "reciprocal",
        }
    }
    fn saves_result(self) -> bool {
        matches!(
            self,
            Unary::Exp
                | Unary::Sigmoid
                | Unary::Tanh
                | Unary::Relu
                | Unary::Sqrt
                | Unary::Reciprocal
        )
    }
    fn saves_self(self) -> bool {
        matches!(self, Unary::Gelu | Unary::Silu)
    }
}

/// Binary pointwise ops with two tensor operands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BinOp {
    Add(f64),
    Sub(f64),
    Mul,
    Div,
}

impl BinOp {
    fn kernel_name(self) -> &'static str {
        match self {
            BinOp::Add(_) => "add",
            BinOp::Sub(_) => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
        }
    }
}

/// Ops of a tensor and a Python number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ScalarOp {
    /// `x + s`
    Add(f64),
    /// `x - s`
    Sub(f64),
    /// `s - x` (`rsub`)
    RSub(f64),
    /// `x * s`
    Mul(f64),
    /// `x / s`
    Div(f64),
    /// `x ** s`
    Pow(f64),
}

/// A kernel with no autograd: one TensorIterator output.
pub(crate) fn pointwise(op: &'static str, inputs: &[&Tensor]) -> Result<Tensor> {
    let mut dt = inputs[0].dtype();
    for t in &inputs[1..] {
        dt = promote(dt, t.dtype());
    }
    iter_output(op, inputs, dt, Category::Output)
}

impl Tensor {
    pub(crate) fn unary(&self, u: Unary) -> Result<Tensor> {
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let mut pending = pending;
        let self_slot = match &mut pending {
            Some(p) if u.saves_self() => Some(p.save(self)),
            _ => None,
        };
        let out = pointwise(u.kernel_name(), &[self])?;
        if let Some(p) = pending {
            p.finish_saving(
                |p| {
                    let slot = if u.saves_result() {
                        p.save_output(&out)
                    } else {
                        self_slot.unwrap_or(0)
                    };
                    Backward::Unary { op: u, slot }
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `torch.neg(x)` / `-x`
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(Unary::Neg)
    }
    /// `torch.exp(x)`
    pub fn exp(&self) -> Result<Tensor> {
        crate::autocast!(self.rt(), "exp", [self] => |a| a.t(0).exp());
        self.unary(Unary::Exp)
    }
    /// `torch.sigmoid(x)`
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(Unary::Sigmoid)
    }
    /// `torch.tanh(x)`
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(Unary::Tanh)
    }
    /// `torch.relu(x)` (`clamp_min(x, 0)`)
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(Unary::Relu)
    }
    /// `F.gelu(x)`
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(Unary::Gelu)
    }
    /// `F.silu(x)`
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(Unary::Silu)
    }
    /// `torch.sqrt(x)`
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(Unary::Sqrt)
    }
    /// `torch.reciprocal(x)`
    pub fn reciprocal(&self) -> Result<Tensor> {
        crate::autocast!(self.rt(), "reciprocal", [self] => |a| a.t(0).reciprocal());
        self.unary(Unary::Reciprocal)
    }

    pub(crate) fn binary(&self, other: &Tensor, op: BinOp) -> Result<Tensor> {
        let mut pending = Pending::begin(self.rt(), &[Some(self), Some(other)]);
        // saved in release_variables() order of the generated node
        let mut slots = (None, None);
        if let Some(p) = &mut pending {
            match op {
                // MulBackward0: other_ if self needs grad, self_ if other does
                BinOp::Mul => {
                    if p.needs(0) {
                        slots.1 = Some(p.save(other));
                    }
                    if p.needs(1) {
                        slots.0 = Some(p.save(self));
                    }
                }
                // DivBackward0: other_ for either grad, self_ for other's
                BinOp::Div => {
                    slots.1 = Some(p.save(other));
                    if p.needs(1) {
                        slots.0 = Some(p.save(self));
                    }
                }
                BinOp::Add(_) | BinOp::Sub(_) => {}
            }
        }
        let out = pointwise(op.kernel_name(), &[self, other])?;
        if let Some(p) = pending {
            p.finish(
                Backward::Binary {
                    op,
                    self_: slots.0,
                    other: slots.1,
                },
                &[&out],
            );
        }
        Ok(out)
    }

    pub(crate) fn scalar_op(&self, op: ScalarOp) -> Result<Tensor> {
        let mut pending = Pending::begin(self.rt(), &[Some(self)]);
        let slot = match (&mut pending, op) {
            (Some(p), ScalarOp::Pow(_)) => Some(p.save(self)),
            _ => None,
        };
        let kernel = match op {
            ScalarOp::Add(_) => "add",
            ScalarOp::Sub(_) => "sub",
            ScalarOp::RSub(_) => "rsub",
            ScalarOp::Mul(_) => "mul",
            ScalarOp::Div(_) => "div",
            ScalarOp::Pow(_) => "pow",
        };
        let out = pointwise(kernel, &[self])?;
        if let Some(p) = pending {
            p.finish(Backward::WithScalar { op, self_: slot }, &[&out]);
        }
        Ok(out)
    }

    /// `a + alpha * b` (`torch.add(a, b, alpha=)`); saves nothing.
    pub fn add_alpha(&self, other: &Tensor, alpha: f64) -> Result<Tensor> {
        self.binary(other, BinOp::Add(alpha))
    }
    /// `a + b`
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinOp::Add(1.0))
    }
    /// `a - b`
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinOp::Sub(1.0))
    }
    /// `a * b`: saves `b` if `a` requires grad and `a` if `b` does.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinOp::Mul)
    }
    /// `a / b`
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinOp::Div)
    }
    /// `x + s`
    pub fn add_scalar(&self, s: Scalar) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Add(s))
    }
    /// `x - s`
    pub fn sub_scalar(&self, s: Scalar) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Sub(s))
    }
    /// `s - x` (`torch.rsub`)
    pub fn rsub_scalar(&self, s: Scalar) -> Result<Tensor> {
        self.scalar_op(ScalarOp::RSub(s))
    }
    /// `x * s`: saves only the number.
    pub fn mul_scalar(&self, s: Scalar) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Mul(s))
    }
    /// `x / s`
    pub fn div_scalar(&self, s: Scalar) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Div(s))
    }
    /// `x ** s` (`pow.Tensor_Scalar`): saves `self`.
    pub fn pow_scalar(&self, s: Scalar) -> Result<Tensor> {
        crate::autocast!(self.rt(), "pow.Tensor_Scalar", [self] => |a| a.t(0).pow_scalar(s));
        self.scalar_op(ScalarOp::Pow(s))
    }
    /// `x.square()` (`pow(x, 2)`).
    pub fn square(&self) -> Result<Tensor> {
        self.pow_scalar(2.0)
    }
    /// `s / x` as Python runs it (`Tensor.__rdiv__`: `self.reciprocal() * other`).
    pub fn rdiv_scalar(&self, s: Scalar) -> Result<Tensor> {
        let r = self.reciprocal()?;
        r.mul_scalar(s)
    }

    // ---- in place ------------------------------------------------------------------

    /// Check and record an in-place op on `self` (`check_inplace` + `rebase_history`).
    pub(crate) fn inplace(
        &self,
        op: &'static str,
        others: &[&Tensor],
        kind: impl FnOnce(&mut Pending) -> Backward,
    ) -> Result<()> {
        let rt = self.rt();
        if rt.is_grad_enabled() && self.is_leaf() && self.requires_grad() {
            return Err(EngineError::LeafInPlace { op });
        }
        let mut inputs: Vec<Option<&Tensor>> = vec![Some(self)];
        inputs.extend(others.iter().map(|t| Some(*t)));
        let pending = Pending::begin(rt, &inputs);
        if pending.is_some() && self.is_view() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: format!("in-place {op} on a view that requires grad (CopySlices)"),
            });
        }
        if !rt.st.borrow().inference_mode {
            self.bump_version();
        }
        if let Some(mut p) = pending {
            let k = kind(&mut p);
            p.finish(k, &[self]);
        }
        rt.count_op();
        Ok(())
    }

    /// `a.add_(b, alpha=)`
    pub fn add_(&self, other: &Tensor, alpha: f64) -> Result<()> {
        self.inplace("add_", &[other], |_| Backward::Binary {
            op: BinOp::Add(alpha),
            self_: None,
            other: None,
        })
    }
    /// `a.mul_(b)`
    pub fn mul_(&self, other: &Tensor) -> Result<()> {
        if self.rt().is_grad_enabled() && (self.requires_grad() || other.requires_grad()) {
            return Err(EngineError::Unsupported {
                what: "mul_ with autograd".into(),
            });
        }
        self.inplace("mul_", &[other], |_| Backward::Binary {
            op: BinOp::Mul,
            self_: None,
            other: None,
        })
    }
    /// `a.div_(b)`: for autograd, `original_self = self.clone()` before the
    /// op (the formula of `other` reads the old `self`), then
    /// `DivBackward0` saves it and `other`.
    pub fn div_(&self, other: &Tensor) -> Result<()> {
        let rt = self.rt().clone();
        let original = if rt.is_grad_enabled() && (self.requires_grad() || other.requires_grad()) {
            Some(rt.no_grad(|| self.clone_contiguous())?)
        } else {
            None
        };
        self.inplace("div_", &[other], |p| {
            // saved in `DivBackward0::release_variables()` order: other_, self_
            let other_ = Some(p.save(other));
            let self_ = original.as_ref().map(|o| p.save(o));
            Backward::Binary {
                op: BinOp::Div,
                self_,
                other: other_,
            }
        })
    }
    /// `a.masked_fill_(mask, v)`: in place; `MaskedFillBackward0` saves the
    /// mask (`grad.masked_fill(mask, 0)`).
    pub fn masked_fill_(&self, mask: &Tensor) -> Result<()> {
        let m = mask.clone();
        self.inplace("masked_fill_", &[], |p| {
            p.save(&m);
            Backward::Custom {
                name: "MaskedFillBackward0",
                backward: std::rc::Rc::new(|saved: &[Tensor], grads: &[Option<Tensor>]| {
                    let Some(g) = grads.first().cloned().flatten() else {
                        return Ok(vec![None]);
                    };
                    Ok(vec![Some(g.masked_fill(&saved[0])?)])
                }),
                num_saved: 1,
            }
        })
    }
    /// An in-place op with only Python numbers (`mul_(s)`, `add_(s)`, `zero_()`, `fill_`, ...).
    pub fn scalar_(&self, op: &'static str) -> Result<()> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: format!("{op} with autograd"),
            });
        }
        self.inplace(op, &[], |_| Backward::Clone)
    }
    /// `a.copy_(b)`
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        if self.rt().is_grad_enabled() && (self.requires_grad() || src.requires_grad()) {
            return Err(EngineError::Unsupported {
                what: "copy_ with autograd".into(),
            });
        }
        self.inplace("copy_", &[src], |_| Backward::Clone)
    }
    /// `t.index_copy_(dim, index, source)` (`index_copy_out`: a
    /// TensorIterator over restrided views of `t`, `index` and `source`,
    /// no memory); `index` int64. Not modelled under autograd.
    pub fn index_copy_(&self, dim: i64, index: &Tensor, source: &Tensor) -> Result<()> {
        const OP: &str = "index_copy_";
        self.try_wrap_dim(OP, dim)?;
        if index.dtype() != crate::dtype::DType::I64 {
            return Err(EngineError::Unsupported {
                what: format!(
                    "index_copy_ with a {} index (int64 is modelled)",
                    index.dtype()
                ),
            });
        }
        if self.rt().is_grad_enabled() && (self.requires_grad() || source.requires_grad()) {
            return Err(EngineError::Unsupported {
                what: "index_copy_ with autograd".into(),
            });
        }
        self.inplace(OP, &[index, source], |_| Backward::Clone)
    }
    /// `t[..., index, ...] = values` with int64 tensor indices
    /// (`index_put_`, `accumulate=False`, not deterministic: `index_put_stub`
    /// over restrided views, no memory). Not modelled under autograd.
    pub fn index_put_at_(&self, indices: &[Option<&Tensor>], values: &Tensor) -> Result<()> {
        const OP: &str = "index_put_";
        if indices.len() > self.dim() {
            return Err(EngineError::Unsupported {
                what: format!(
                    "index_put_ with {} indices into a tensor of dimension {}",
                    indices.len(),
                    self.dim()
                ),
            });
        }
        let idx: Vec<&Tensor> = indices.iter().flatten().copied().collect();
        if idx.iter().any(|t| t.dtype() != crate::dtype::DType::I64) {
            return Err(EngineError::Unsupported {
                what: "index_put_ with a non-int64 index (int64 is modelled)".into(),
            });
        }
        if self.rt().is_grad_enabled() && (self.requires_grad() || values.requires_grad()) {
            return Err(EngineError::Unsupported {
                what: "index_put_ with autograd".into(),
            });
        }
        let mut others = idx;
        others.push(values);
        self.inplace(OP, &others, |_| Backward::Clone)
    }
}

// ---- split (SplitBackward0), gather ----
mod split_gather {
    use crate::autograd::{Backward, Pending};
    use crate::error::{EngineError, Result};
    use crate::runtime::Category;
    use crate::tensor::Tensor;

    impl Tensor {
        /// `t.split(split_size, dim)` (`split.Tensor`): views of `split_size`
        /// along `dim` (the last one shorter when the size does not divide),
        /// no allocation. One `SplitBackward0` node for all the outputs
        /// (derivatives.yaml: `self: split_backward(grads, split_size, dim,
        /// self.sym_sizes(), self.options())`, which saves no tensor): its
        /// backward materialises undefined gradients as zeros and `cat`s them
        /// into one contiguous gradient of `self`'s size.
        pub fn split(&self, split_size: i64, dim: i64) -> Result<Vec<Tensor>> {
            if self.dim() == 0 {
                return Err(crate::error::shape_err(
                    "split",
                    "split expects at least a 1-dimensional tensor",
                ));
            }
            let d = self.try_wrap_dim("split", dim)?;
            if d >= self.dim() {
                return Err(crate::error::shape_err(
                    "split",
                    format!("dim {dim} out of range for {:?}", self.sizes()),
                ));
            }
            let size = self.sizes()[d];
            if split_size < 0 || (split_size == 0 && size != 0) {
                return Err(crate::error::shape_err(
                    "split",
                    format!(
                        "split_size can only be 0 if dimension size is 0, but got {split_size}"
                    ),
                ));
            }
            // ATen `split`: num_splits = max((dim_size + split_size - 1) / split_size, 1)
            let n = if split_size == 0 {
                1
            } else {
                ((size + split_size - 1) / split_size).max(1)
            };
            let mut lengths = Vec::with_capacity(n as usize);
            let mut outs = Vec::with_capacity(n as usize);
            for i in 0..n {
                let start = i * split_size;
                let len = split_size.min(size - start);
                let mut s = self.dims();
                s.as_mut_slice()[d] = len;
                let off = self.0.offset + start * self.strides()[d];
                outs.push(self.alias_with(s, crate::dims::Dims::new(self.strides()), off));
                lengths.push(len);
            }
            if let Some(p) = Pending::begin(self.rt(), &[Some(self)]) {
                let refs: Vec<&Tensor> = outs.iter().collect();
                p.finish(
                    Backward::Split {
                        dim: d,
                        sizes: self.dims(),
                        lengths,
                    },
                    &refs,
                );
            }
            self.rt().count_op();
            Ok(outs)
        }

        /// `torch.gather(self, dim, index)`: one contiguous output of `index`'s
        /// shape in `self`'s dtype (the structured `gather_out` meta). Only on
        /// tensors that need no gradient (`GatherBackward0` is not modelled):
        /// BERT gathers its int64 `token_type_ids` buffer.
        pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
            if self.dim() != index.dim() {
                return Err(crate::error::shape_err(
                    "gather",
                    format!(
                        "index {:?} and input {:?} must have the same number of dimensions",
                        index.sizes(),
                        self.sizes()
                    ),
                ));
            }
            let d = self.try_wrap_dim("gather", dim)?;
            for (i, (&a, &b)) in index.sizes().iter().zip(self.sizes()).enumerate() {
                if i != d && a > b {
                    return Err(crate::error::shape_err(
                        "gather",
                        format!(
                            "size of index {:?} exceeds the input {:?} at dimension {i}",
                            index.sizes(),
                            self.sizes()
                        ),
                    ));
                }
            }
            if !matches!(index.dtype(), crate::dtype::DType::I64) {
                return Err(EngineError::Mismatch {
                    op: "gather",
                    detail: format!(
                        "gather(): expected dtype int64 for index, got {}",
                        index.dtype()
                    ),
                });
            }
            if self.rt().is_grad_enabled() && self.requires_grad() {
                return Err(EngineError::Unsupported {
                    what: "gather with autograd".into(),
                });
            }
            self.rt().empty_op(
                index.sizes(),
                self.dtype(),
                self.device(),
                "gather",
                Category::Output,
            )
        }
    }

    #[cfg(test)]
    mod tests {
        use crate::{DType, Device, Runtime};

        #[test]
        fn split_makes_views_and_one_node_whose_backward_cats() {
            let rt = Runtime::default();
            let x = rt.randn(&[2, 4, 10], DType::F32, Device::Cuda).unwrap();
            x.requires_grad_(true).unwrap();
            let before = rt.memory_allocated();
            let parts = x.split(4, 2).unwrap();
            assert_eq!(rt.memory_allocated(), before, "views only");
            let lens: Vec<i64> = parts.iter().map(|p| p.size(2)).collect();
            assert_eq!(lens, [4, 4, 2]);
            assert_eq!(parts[2].strides(), x.strides());
            let n0 = parts[0].grad_fn().unwrap();
            assert_eq!(n0.name(), "SplitBackward0");
            assert_eq!(n0.num_saved(), 0);
            assert!(std::rc::Rc::ptr_eq(&n0, &parts[1].grad_fn().unwrap()));
            // only the middle piece is used: two zero pieces, then one cat
            let s = parts[1].sum().unwrap();
            drop(parts);
            drop(n0);
            s.backward().unwrap();
            let g = x.grad().unwrap();
            assert_eq!(g.sizes(), x.sizes());
            assert!(g.is_contiguous());
            assert!(x.split(0, 2).is_err());
            assert!(x.split(3, 5).is_err());
        }

        /// `div_` under autograd: `DivBackward0::release_variables()` frees
        /// `other_` before `self_` (the clone of the original self), as the
        /// H200's trace of Mixtral's router renormalisation does.
        #[test]
        fn inplace_div_node_releases_other_before_the_original_self() {
            let rt = Runtime::default();
            rt.record_memory_history(true);
            let p = rt.randn(&[64, 4], DType::F32, Device::Cuda).unwrap();
            p.requires_grad_(true).unwrap();
            let top = p.mul(&p).unwrap();
            let sum = top.sum_dims(&[-1], true).unwrap();
            let before = rt.trace_len();
            top.div_(&sum).unwrap();
            // the clone of `top` before the op: the one allocation of div_
            let clone_at = rt.trace()[before..]
                .iter()
                .find(|e| e.action.as_str() == "alloc")
                .unwrap()
                .addr;
            let sum_at = sum.data_ptr().unwrap();
            drop(sum);
            let s = top.sum().unwrap();
            drop(top);
            let from = rt.trace_len();
            s.backward().unwrap();
            let freed = crate::ops::freed_since(&rt, from);
            let at = |a: u64| freed.iter().position(|&f| f == a).unwrap();
            assert!(at(sum_at) < at(clone_at), "other must be freed before self");
        }

        #[test]
        fn gather_allocates_the_index_shape_in_the_input_dtype() {
            let rt = Runtime::default();
            let buf = rt.empty(&[1, 512], DType::I64, Device::Cuda).unwrap();
            let idx = rt.empty(&[1, 256], DType::I64, Device::Cuda).unwrap();
            let before = rt.memory_allocated();
            let g = buf.gather(1, &idx).unwrap();
            assert_eq!((g.sizes(), g.dtype()), (&[1i64, 256][..], DType::I64));
            assert_eq!(rt.memory_allocated() - before, 2048);
            let bad = rt.empty(&[1, 256], DType::I32, Device::Cuda).unwrap();
            assert!(buf.gather(1, &bad).is_err());
            let too_big = rt.empty(&[2, 256], DType::I64, Device::Cuda).unwrap();
            assert!(buf.gather(1, &too_big).is_err());
        }
    }
}

// ---- rsqrt, cos, sin (RMSNorm and the rotary embedding) ----
impl Tensor {
    /// `torch.rsqrt(x)`: one TensorIterator output; `RsqrtBackward0` saves
    /// the result (`self: -0.5 * grad * result.pow(3).conj()`).
    pub fn rsqrt(&self) -> Result<Tensor> {
        crate::autocast!(self.rt(), "rsqrt", [self] => |a| a.t(0).rsqrt());
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let out = pointwise("rsqrt", &[self])?;
        if let Some(p) = pending {
            p.finish_saving(
                |p| Backward::Rsqrt {
                    result: p.save_output(&out),
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `x.cos()`: `CosBackward0` saves self (`self: grad * -self.sin().conj()`).
    pub fn cos(&self) -> Result<Tensor> {
        let mut pending = Pending::begin(self.rt(), &[Some(self)]);
        let slot = pending.as_mut().map(|p| p.save(self));
        let out = pointwise("cos", &[self])?;
        if let (Some(p), Some(self_)) = (pending, slot) {
            p.finish(Backward::Cos { self_ }, &[&out]);
        }
        Ok(out)
    }

    /// `x.sin()`: `SinBackward0` saves self (`self: grad * self.cos().conj()`).
    pub fn sin(&self) -> Result<Tensor> {
        let mut pending = Pending::begin(self.rt(), &[Some(self)]);
        let slot = pending.as_mut().map(|p| p.save(self));
        let out = pointwise("sin", &[self])?;
        if let (Some(p), Some(self_)) = (pending, slot) {
            p.finish(Backward::Sin { self_ }, &[&out]);
        }
        Ok(out)
    }
}

// ---- torch.max(t), torch.pow(scalar, t) (Phi-3's longrope update) ----
impl Tensor {
    /// `torch.max(t)` (all elements; `max_unary_out`): a 0-dim output of
    /// `t`'s dtype, then `max_all_kernel_impl`'s `gpu_reduce_kernel` over
    /// `t.contiguous()` with the accumulator in `t`'s own dtype (the global
    /// scratch of a multi-CTA reduction, as for `sum`). Only where no
    /// gradient is recorded (`MaxBackward1` is not modelled): phi3's
    /// `torch.max(position_ids)` runs under `no_grad` on int64 ids.
    pub fn max_all(&self) -> Result<Tensor> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: "torch.max(t) with autograd (MaxBackward1)".into(),
            });
        }
        if self.numel() == 0 {
            return Err(crate::error::shape_err(
                "max",
                "max(): Expected reduction dim to be specified for input.numel() == 0",
            ));
        }
        let rt = self.rt().clone();
        let out = rt.empty_op(&[], self.dtype(), self.device(), "max", Category::Output)?;
        let x = self.contiguous()?;
        if x.device() == crate::dtype::Device::Cuda {
            let all = vec![true; x.dim()];
            crate::ops::reduce::alloc_reduce_scratch(&rt, &x, &all, x.dtype(), "max")?;
        }
        drop(x);
        Ok(out)
    }

    /// `torch.pow(base, t)` / `base ** t` with a Python float `base`
    /// (`pow.Scalar`): one TensorIterator output, of `t`'s dtype when it is
    /// floating, else float32 (`result_type` of a float scalar and an
    /// integer tensor). Only where no gradient is recorded (`PowBackward2`
    /// is not modelled).
    pub fn rpow_scalar(&self, _base: Scalar) -> Result<Tensor> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: "torch.pow(scalar, t) with autograd (PowBackward2)".into(),
            });
        }
        let dt = if self.dtype().is_floating() {
            self.dtype()
        } else {
            crate::dtype::DType::F32
        };
        iter_output("pow", &[self], dt, Category::Output)
    }
}
