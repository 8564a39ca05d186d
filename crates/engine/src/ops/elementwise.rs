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
}
