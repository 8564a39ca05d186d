//! Backward formulas, one per node type, as `derivatives.yaml` (PyTorch
//! 2.11) writes them and `FunctionsManual.cpp` implements them. They run
//! with grad mode off on the autograd thread; every temporary is created
//! and dropped where the C++ full-expression creates and destroys it.

use std::fmt;
use std::rc::Rc;

use crate::autograd::Node;
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::Result;
use crate::ops::elementwise::{pointwise, BinOp, ScalarOp, Unary};
use crate::ops::empty_like;
use crate::runtime::Category;
use crate::tensor::Tensor;

/// Sizes and strides of a matrix operand (`mat1_sym_sizes`, `mat1_sym_strides`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatMeta {
    pub(crate) sizes: Dims,
    pub(crate) strides: Dims,
}

/// A user backward (`torch.autograd.Function.backward`): saved tensors and
/// incoming gradients in, one gradient per forward input out.
pub type CustomBackward = Rc<dyn Fn(&[Tensor], &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>>>;

/// The node types. Saved tensors live in the node (`Node::saved`); these
/// hold their slots and the non-tensor attributes.
pub(crate) enum Backward {
    AccumulateGrad {
        variable: Tensor,
    },
    Unary {
        op: Unary,
        slot: usize,
    },
    Binary {
        op: BinOp,
        self_: Option<usize>,
        other: Option<usize>,
    },
    WithScalar {
        op: ScalarOp,
        self_: Option<usize>,
    },
    Reshape {
        sizes: Dims,
        name: &'static str,
    },
    Clone,
    Transpose {
        d0: usize,
        d1: usize,
    },
    T,
    Permute {
        dims: Vec<usize>,
    },
    Expand {
        sizes: Dims,
    },
    Unsqueeze {
        dim: usize,
    },
    Squeeze {
        dim: usize,
        sizes: Dims,
    },
    Select {
        dim: usize,
        index: i64,
        sizes: Dims,
    },
    Slice {
        dim: usize,
        start: i64,
        sizes: Dims,
    },
    Reduce {
        sizes: Dims,
        dims: Vec<usize>,
        keepdim: bool,
        all: bool,
        mean: bool,
        numel: i64,
    },
    Mm {
        self_: Option<usize>,
        mat2: Option<usize>,
        self_meta: MatMeta,
        mat2_meta: MatMeta,
    },
    Addmm {
        mat1: Option<usize>,
        mat2: Option<usize>,
        mat1_meta: MatMeta,
        mat2_meta: MatMeta,
    },
    Bmm {
        self_: Option<usize>,
        mat2: Option<usize>,
    },
    LayerNorm {
        slots: [Option<usize>; 5],
        normalized: Dims,
    },
    Dropout {
        mask: usize,
        p: f64,
    },
    Softmax {
        result: usize,
        dim: usize,
        log: bool,
    },
    MseLoss {
        self_: usize,
        target: usize,
    },
    NllLoss {
        self_: usize,
        target: usize,
        total_weight: usize,
    },
    Embedding {
        indices: usize,
        num_weights: i64,
    },
    // ScaledDotProduct{Cudnn,Flash,Efficient}AttentionBackward0
    FusedAttention(crate::ops::attention::FusedAttention),
    ToCopy {
        device: Device,
        dtype: DType,
    },
    Custom {
        name: &'static str,
        backward: CustomBackward,
        num_saved: usize,
    },
    /// `SplitBackward0`: one node for every output of `split`; keeps the
    /// input's sizes and each output's length along `dim`.
    Split {
        dim: usize,
        sizes: Dims,
        lengths: Vec<i64>,
    },
    /// `ConvolutionBackward0`: saves input and weight (`derivatives.yaml`)
    Convolution {
        input: usize,
        weight: usize,
        args: crate::ops::conv::Conv2dArgs,
    },
    /// `RsqrtBackward0`: saves result (`self: -0.5 * grad * result.pow(3).conj()`)
    Rsqrt {
        result: usize,
    },
    /// `CosBackward0`: saves self (`self: grad * -self.sin().conj()`)
    Cos {
        self_: usize,
    },
    /// `SinBackward0`: saves self (`self: grad * self.cos().conj()`)
    Sin {
        self_: usize,
    },
    /// `CatBackward0`: saves the inputs' sizes only (`cat_tensors_backward`)
    Cat {
        dim: usize,
        sizes: Vec<Dims>,
    },
    /// `AliasBackward0`: `self: grad`
    Alias,
    /// `WhereBackward0`: saves condition (`self: where(condition, grad, 0)`,
    /// `other: where(condition, 0, grad)`)
    Where {
        condition: usize,
    },
    /// `ConstantPadNdBackward0`: saves no tensor (`constant_pad_nd_backward(grad, pad)`)
    ConstantPad {
        pad: Vec<i64>,
    },
}

impl fmt::Debug for Backward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        // the non-tensor attributes each node keeps, as PyTorch's nodes do
        match self {
            Backward::LayerNorm { normalized, .. } => {
                write!(f, "(normalized_shape={normalized:?})")
            }
            Backward::Dropout { p, .. } => write!(f, "(p={p})"),
            Backward::Softmax { dim, .. } => write!(f, "(dim={dim})"),
            Backward::NllLoss {
                target,
                total_weight,
                ..
            } => write!(f, "(target=#{target}, total_weight=#{total_weight})"),
            Backward::FusedAttention(a) => write!(
                f,
                "(logsumexp=#{}, output=#{}, philox_seed={:?}, dropout_p={}, is_causal={}, scale={:?})",
                a.slots.logsumexp, a.slots.output, a.slots.philox_seed, a.dropout_p, a.is_causal, a.scale
            ),
            _ => Ok(()),
        }
    }
}

impl Backward {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backward::AccumulateGrad { .. } => "AccumulateGrad",
            Backward::Unary { op, .. } => match op {
                Unary::Neg => "NegBackward0",
                Unary::Exp => "ExpBackward0",
                Unary::Sigmoid => "SigmoidBackward0",
                Unary::Tanh => "TanhBackward0",
                Unary::Relu => "ReluBackward0",
                Unary::Gelu => "GeluBackward0",
                Unary::Silu => "SiluBackward0",
                Unary::Sqrt => "SqrtBackward0",
                Unary::Reciprocal => "ReciprocalBackward0",
            },
            Backward::Binary { op, .. } => match op {
                BinOp::Add(_) => "AddBackward0",
                BinOp::Sub(_) => "SubBackward0",
                BinOp::Mul => "MulBackward0",
                BinOp::Div => "DivBackward0",
            },
            Backward::WithScalar { op, .. } => match op {
                ScalarOp::Add(_) => "AddBackward0",
                ScalarOp::Sub(_) => "SubBackward0",
                ScalarOp::RSub(_) => "RsubBackward1",
                ScalarOp::Mul(_) => "MulBackward0",
                ScalarOp::Div(_) => "DivBackward0",
                ScalarOp::Pow(_) => "PowBackward0",
            },
            Backward::Reshape { name, .. } => name,
            Backward::Clone => "CloneBackward0",
            Backward::Transpose { .. } => "TransposeBackward0",
            Backward::T => "TBackward0",
            Backward::Permute { .. } => "PermuteBackward0",
            Backward::Expand { .. } => "ExpandBackward0",
            Backward::Unsqueeze { .. } => "UnsqueezeBackward0",
            Backward::Squeeze { .. } => "SqueezeBackward1",
            Backward::Select { .. } => "SelectBackward0",
            Backward::Slice { .. } => "SliceBackward0",
            Backward::Reduce { mean, all, .. } => match (mean, all) {
                (false, true) => "SumBackward0",
                (false, false) => "SumBackward1",
                (true, true) => "MeanBackward0",
                (true, false) => "MeanBackward1",
            },
            Backward::Mm { .. } => "MmBackward0",
            Backward::Addmm { .. } => "AddmmBackward0",
            Backward::Bmm { .. } => "BmmBackward0",
            Backward::LayerNorm { .. } => "NativeLayerNormBackward0",
            Backward::Dropout { .. } => "NativeDropoutBackward0",
            Backward::Softmax { log: false, .. } => "SoftmaxBackward0",
            Backward::Softmax { log: true, .. } => "LogSoftmaxBackward0",
            Backward::MseLoss { .. } => "MseLossBackward0",
            Backward::NllLoss { .. } => "NllLossBackward0",
            Backward::Embedding { .. } => "EmbeddingBackward0",
            Backward::FusedAttention(a) => a.name(),
            Backward::ToCopy { .. } => "ToCopyBackward0",
            Backward::Custom { name, .. } => name,
            Backward::Split { .. } => "SplitBackward0",
            Backward::Convolution { .. } => "ConvolutionBackward0",
            Backward::Rsqrt { .. } => "RsqrtBackward0",
            Backward::Cos { .. } => "CosBackward0",
            Backward::Sin { .. } => "SinBackward0",
            Backward::Cat { .. } => "CatBackward0",
            Backward::Alias => "AliasBackward0",
            Backward::Where { .. } => "WhereBackward0",
            Backward::ConstantPad { .. } => "ConstantPadNdBackward0",
        }
    }
}

/// `maybe_multiply(t, s)`: `t` itself when `s == 1`.
fn maybe_multiply(t: &Tensor, s: f64) -> Result<Tensor> {
    if s == 1.0 {
        Ok(t.clone())
    } else {
        t.mul_scalar(s)
    }
}

/// `mm_mat1_backward(grad, mat2, mat1 sizes/strides)`: column-major inputs get
/// a column-major gradient.
fn mm_mat1_backward(grad: &Tensor, mat2: &Tensor, m1: &MatMeta) -> Result<Tensor> {
    if m1.strides[0] == 1 && m1.strides[1] == m1.sizes[0] {
        let gt = grad.t();
        let r = mat2.mm(&gt)?;
        return Ok(r.t());
    }
    let m2t = mat2.t();
    grad.mm(&m2t)
}

/// `mm_mat2_backward(grad, mat1, mat2 sizes/strides)`.
fn mm_mat2_backward(grad: &Tensor, mat1: &Tensor, m2: &MatMeta) -> Result<Tensor> {
    if m2.strides[0] == 1 && m2.strides[1] == m2.sizes[0] {
        let gt = grad.t();
        let r = gt.mm(mat1)?;
        return Ok(r.t());
    }
    let m1t = mat1.t();
    m1t.mm(grad)
}

impl Node {
    /// `Node::apply`: the gradients for each next edge.
    pub(crate) fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let n = self.edges.len();
        let mut out: Vec<Option<Tensor>> = vec![None; n];
        // SplitBackward0 takes every output's gradient,
        // any of which may be undefined (not only the first)
        if let Backward::Split { .. } = &self.kind {
            return self.apply_split(grads);
        }
        let Some(g) = grads.first().and_then(|g| g.clone()) else {
            if let Backward::Custom { .. } = &self.kind {
            } else {
                return Ok(out);
            }
            return self.apply_custom(grads);
        };
        let needs = |i: usize| self.needs(i);
        match &self.kind {
            Backward::AccumulateGrad { .. } => {
                unreachable!("AccumulateGrad is applied by the engine")
            }
            Backward::Unary { op, slot } => {
                if !needs(0) {
                    return Ok(out);
                }
                out[0] = Some(match op {
                    Unary::Neg => g.neg()?,
                    Unary::Exp => g.mul(&self.saved(*slot)?)?,
                    Unary::Sigmoid => pointwise("sigmoid_backward", &[&g, &self.saved(*slot)?])?,
                    Unary::Tanh => pointwise("tanh_backward", &[&g, &self.saved(*slot)?])?,
                    Unary::Relu => pointwise("threshold_backward", &[&g, &self.saved(*slot)?])?,
                    Unary::Gelu => pointwise("gelu_backward", &[&g, &self.saved(*slot)?])?,
                    Unary::Silu => pointwise("silu_backward", &[&g, &self.saved(*slot)?])?,
                    Unary::Sqrt => {
                        let r = self.saved(*slot)?;
                        let two_r = r.mul_scalar(2.0)?;
                        g.div(&two_r)?
                    }
                    Unary::Reciprocal => {
                        // -grad * (result * result).conj()
                        let r = self.saved(*slot)?;
                        let rr = r.mul(&r)?;
                        let ng = g.neg()?;
                        let o = ng.mul(&rr)?;
                        drop(ng);
                        drop(rr);
                        o
                    }
                });
            }
            Backward::Binary { op, self_, other } => match op {
                BinOp::Add(alpha) => {
                    if needs(0) {
                        out[0] = Some(g.clone());
                    }
                    if needs(1) {
                        out[1] = Some(maybe_multiply(&g, *alpha)?);
                    }
                }
                BinOp::Sub(alpha) => {
                    if needs(0) {
                        out[0] = Some(g.clone());
                    }
                    if needs(1) {
                        let ng = g.neg()?;
                        out[1] = Some(maybe_multiply(&ng, *alpha)?);
                    }
                }
                BinOp::Mul => {
                    // self: mul_tensor_backward(grad, other), other: mul_tensor_backward(grad, self)
                    // sorted(defn.keys()) puts `other` first
                    // (see the Mm arm)
                    if needs(1) {
                        out[1] = Some(g.mul(&self.saved(self_.unwrap_or(0))?)?);
                    }
                    if needs(0) {
                        out[0] = Some(g.mul(&self.saved(other.unwrap_or(0))?)?);
                    }
                }
                BinOp::Div => {
                    let o = self.saved(other.unwrap_or(0))?;
                    // `other` before `self` (sorted keys)
                    if needs(1) {
                        // -grad * ((self / other) / other).conj()
                        let s = self.saved(self_.unwrap_or(0))?;
                        let t1 = s.div(&o)?;
                        let t2 = t1.div(&o)?;
                        let ng = g.neg()?;
                        let r = ng.mul(&t2)?;
                        drop(ng);
                        drop(t2);
                        drop(t1);
                        out[1] = Some(r);
                    }
                    if needs(0) {
                        out[0] = Some(g.div(&o)?);
                    }
                }
            },
            Backward::WithScalar { op, self_ } => {
                if !needs(0) {
                    return Ok(out);
                }
                out[0] = Some(match op {
                    ScalarOp::Add(_) | ScalarOp::Sub(_) => g.clone(),
                    ScalarOp::RSub(_) => g.neg()?,
                    // mul_tensor_backward(grad, other): grad * other (a CPU scalar)
                    ScalarOp::Mul(s) => g.mul_scalar(*s)?,
                    ScalarOp::Div(s) => g.div_scalar(*s)?,
                    ScalarOp::Pow(e) => {
                        // pow_backward: grad * (exponent * self.pow(exponent - 1)).conj()
                        let s = self.saved(self_.unwrap_or(0))?;
                        if *e == 0.0 {
                            s.zeros_like()?
                        } else {
                            let t1 = s.pow_scalar(e - 1.0)?;
                            let t2 = t1.mul_scalar(*e)?;
                            let r = g.mul(&t2)?;
                            drop(t2);
                            drop(t1);
                            r
                        }
                    }
                });
            }
            Backward::Reshape { sizes, .. } => {
                if needs(0) {
                    out[0] = Some(g.reshape(sizes)?);
                }
            }
            Backward::Clone => {
                if needs(0) {
                    out[0] = Some(g.clone());
                }
            }
            Backward::Transpose { d0, d1 } => {
                if needs(0) {
                    out[0] = Some(g.transpose(*d0 as i64, *d1 as i64));
                }
            }
            Backward::T => {
                if needs(0) {
                    out[0] = Some(g.t());
                }
            }
            Backward::Permute { dims } => {
                if needs(0) {
                    let mut inv = vec![0usize; dims.len()];
                    for (i, &d) in dims.iter().enumerate() {
                        inv[d] = i;
                    }
                    out[0] = Some(g.permute(&inv));
                }
            }
            Backward::Expand { sizes } => {
                if needs(0) {
                    out[0] = Some(g.sum_to(sizes)?);
                }
            }
            Backward::Unsqueeze { dim } => {
                if needs(0) {
                    out[0] = Some(g.squeeze_dim(*dim as i64));
                }
            }
            Backward::Squeeze { dim, sizes } => {
                if needs(0) {
                    out[0] = Some(if sizes[*dim] == 1 && g.dim() < sizes.len() {
                        g.unsqueeze(*dim as i64)?
                    } else {
                        g.clone()
                    });
                }
            }
            Backward::Select { dim, index, sizes }
            | Backward::Slice {
                dim,
                start: index,
                sizes,
            } => {
                if needs(0) {
                    // select_backward / slice_backward: zeros(input_sizes), then copy_ into the slice
                    let z = g.rt().empty_op(
                        sizes,
                        g.dtype(),
                        g.device(),
                        "zeros",
                        Category::Gradient,
                    )?;
                    let _ = (dim, index);
                    out[0] = Some(z);
                }
            }
            Backward::Reduce {
                sizes,
                dims,
                keepdim,
                all,
                mean,
                numel,
            } => {
                if needs(0) {
                    let mut e = g.clone();
                    if !*all && !*keepdim {
                        for &d in dims {
                            e = e.unsqueeze(d as i64)?;
                        }
                    }
                    let ex = e.expand(sizes)?;
                    drop(e);
                    out[0] = Some(if *mean {
                        let n = if *all {
                            *numel
                        } else {
                            dims.iter().map(|&d| sizes[d]).product()
                        };
                        ex.div_scalar(n as f64)?
                    } else {
                        ex
                    });
                }
            }
            Backward::Mm {
                self_,
                mat2,
                self_meta,
                mat2_meta,
            } => {
                // codegen order. load_derivatives.py walks
                // `sorted(defn.keys())`, so the formula blocks run alphabetically
                // (mat2 before self; other before self); the H100 shows it in
                // mha_w/mha_now backward (bmm and mm: the mat2 gradient first).
                if needs(1) {
                    out[1] = Some(mm_mat2_backward(
                        &g,
                        &self.saved(self_.unwrap_or(0))?,
                        mat2_meta,
                    )?);
                }
                if needs(0) {
                    out[0] = Some(mm_mat1_backward(
                        &g,
                        &self.saved(mat2.unwrap_or(0))?,
                        self_meta,
                    )?);
                }
            }
            Backward::Addmm {
                mat1,
                mat2,
                mat1_meta,
                mat2_meta,
            } => {
                if needs(0) {
                    out[0] = Some(g.clone());
                }
                if needs(1) {
                    out[1] = Some(mm_mat1_backward(
                        &g,
                        &self.saved(mat2.unwrap_or(0))?,
                        mat1_meta,
                    )?);
                }
                if needs(2) {
                    out[2] = Some(mm_mat2_backward(
                        &g,
                        &self.saved(mat1.unwrap_or(0))?,
                        mat2_meta,
                    )?);
                }
            }
            Backward::Bmm { self_, mat2 } => {
                // codegen order. load_derivatives.py walks
                // `sorted(defn.keys())`, so the formula blocks run alphabetically
                // (mat2 before self; other before self); the H100 shows it in
                // mha_w/mha_now backward (bmm and mm: the mat2 gradient first).
                if needs(1) {
                    let s = self.saved(self_.unwrap_or(0))?;
                    let st = s.transpose(1, 2);
                    out[1] = Some(st.bmm(&g)?);
                }
                if needs(0) {
                    let m2 = self.saved(mat2.unwrap_or(0))?;
                    let m2t = m2.transpose(1, 2);
                    out[0] = Some(g.bmm(&m2t)?);
                }
            }
            Backward::LayerNorm { slots, .. } => {
                let input = self.saved(slots[1].unwrap_or(0))?;
                let rt = g.rt().clone();
                let op = "native_layer_norm_backward";
                if needs(0) {
                    out[0] = Some(rt.empty_op(
                        input.sizes(),
                        input.dtype(),
                        input.device(),
                        op,
                        Category::Gradient,
                    )?);
                }
                if needs(1) {
                    let w = self.saved(slots[2].unwrap_or(0))?;
                    out[1] = Some(rt.empty_op(
                        w.sizes(),
                        w.dtype(),
                        w.device(),
                        op,
                        Category::Gradient,
                    )?);
                }
                if needs(2) {
                    let b = self.saved(slots[0].unwrap_or(0))?;
                    out[2] = Some(rt.empty_op(
                        b.sizes(),
                        b.dtype(),
                        b.device(),
                        op,
                        Category::Gradient,
                    )?);
                }
                // LayerNormBackwardKernelImpl passes
                // `dY.contiguous()` to the kernel after dX/dgamma/dbeta exist
                // (layer_norm_kernel.cu); enc_pre on the H100: the copy of the
                // transposed in-projection gradient comes after the three.
                let dy = g.contiguous()?;
                drop(dy);
            }
            Backward::Dropout { mask, .. } => {
                if needs(0) {
                    let _m = self.saved(*mask)?;
                    out[0] = Some(empty_like(
                        &g,
                        g.dtype(),
                        "native_dropout_backward",
                        Category::Gradient,
                    )?);
                }
            }
            Backward::Softmax { result, log, .. } => {
                if needs(0) {
                    let r = self.saved(*result)?;
                    let gc = g.contiguous()?;
                    let op = if *log {
                        "_log_softmax_backward_data"
                    } else {
                        "_softmax_backward_data"
                    };
                    out[0] = Some(r.rt().empty_op(
                        r.sizes(),
                        r.dtype(),
                        r.device(),
                        op,
                        Category::Gradient,
                    )?);
                    // softmax_backward_cuda_out computes
                    // `Tensor tmp = grad * output;` after the structured output
                    // (SoftMax.cu; log_softmax has no such temporary). mha_w on the
                    // H100: a second (B*H, L, S) tensor allocated and freed at once.
                    if !*log {
                        let tmp = crate::ops::iter_output(
                            "mul",
                            &[&gc, &r],
                            r.dtype(),
                            Category::Temporary,
                        )?;
                        drop(tmp);
                    }
                    drop(gc);
                }
            }
            Backward::MseLoss { self_, target } => {
                let s = self.saved(*self_)?;
                let t = self.saved(*target)?;
                if needs(0) {
                    out[0] = Some(empty_like(
                        &s,
                        s.dtype(),
                        "mse_loss_backward",
                        Category::Gradient,
                    )?);
                }
                if needs(1) {
                    out[1] = Some(empty_like(
                        &t,
                        t.dtype(),
                        "mse_loss_backward",
                        Category::Gradient,
                    )?);
                }
            }
            Backward::NllLoss { self_, .. } => {
                if needs(0) {
                    let s = self.saved(*self_)?;
                    out[0] = Some(empty_like(
                        &s,
                        s.dtype(),
                        "nll_loss_backward",
                        Category::Gradient,
                    )?);
                }
            }
            Backward::Embedding {
                indices,
                num_weights,
            } => {
                if needs(0) {
                    let idx = self.saved(*indices)?;
                    let gw = crate::ops::nn::embedding_dense_backward(&g, &idx, *num_weights)?;
                    out[0] = Some(gw);
                }
            }
            Backward::FusedAttention(a) => {
                // ops/attention.rs
                return crate::ops::attention::fused_backward(self, a, &g);
            }
            Backward::ToCopy { device, dtype } => {
                if needs(0) {
                    let r = if *device != g.device() {
                        g.to_device(*device)?
                    } else {
                        g.clone()
                    };
                    out[0] = Some(r.to_dtype(*dtype)?);
                }
            }
            Backward::Custom { .. } => {
                drop(g);
                return self.apply_custom(grads);
            }
            // (handled before the match: `apply_split`)
            Backward::Split { .. } => {
                drop(g);
                return self.apply_split(grads);
            }
            Backward::Convolution {
                input,
                weight,
                args,
            } => {
                let (i, w) = (self.saved(*input)?, self.saved(*weight)?);
                let [gi, gw, gb] = crate::ops::conv::convolution_backward(
                    &g,
                    &i,
                    &w,
                    args,
                    [needs(0), needs(1), needs(2)],
                )?;
                out[0] = gi;
                out[1] = gw;
                out[2] = gb;
            }
            Backward::Rsqrt { result } => {
                if needs(0) {
                    // -0.5 * grad * result.pow(3).conj(): GCC evaluates the
                    // operands of the outer `*` right to left (pow first);
                    // the temporaries die in reverse order of creation
                    let r = self.saved(*result)?;
                    let p3 = r.pow_scalar(3.0)?;
                    let hg = g.mul_scalar(-0.5)?;
                    let o = hg.mul(&p3)?;
                    drop(hg);
                    drop(p3);
                    out[0] = Some(o);
                }
            }
            Backward::Cos { self_ } => {
                if needs(0) {
                    // grad * -self.sin().conj()
                    let s = self.saved(*self_)?;
                    let sn = s.sin()?;
                    let ng = sn.neg()?;
                    let o = g.mul(&ng)?;
                    drop(ng);
                    drop(sn);
                    out[0] = Some(o);
                }
            }
            Backward::Sin { self_ } => {
                if needs(0) {
                    // grad * self.cos().conj()
                    let s = self.saved(*self_)?;
                    let c = s.cos()?;
                    let o = g.mul(&c)?;
                    drop(c);
                    out[0] = Some(o);
                }
            }
            Backward::Cat { dim, sizes } => {
                out = crate::ops::shape::cat_backward(&g, *dim, sizes, needs)?;
            }
            Backward::Alias => {
                if needs(0) {
                    out[0] = Some(g.clone());
                }
            }
            Backward::Where { condition } => {
                // derivatives are emitted in sorted key order: other, then self
                let c = self.saved(*condition)?;
                if needs(1) {
                    out[1] = Some(crate::ops::shape::where_backward(&g, &c)?);
                }
                if needs(0) {
                    out[0] = Some(crate::ops::shape::where_backward(&g, &c)?);
                }
            }
            Backward::ConstantPad { pad } => {
                if needs(0) {
                    out[0] = Some(crate::ops::shape::constant_pad_backward(&g, pad)?);
                }
            }
        }
        Ok(out)
    }

    /// `split_backward` → `split_with_sizes_backward` (FunctionsManual.cpp):
    /// every undefined gradient becomes `at::zeros` of its piece, then
    /// `at::cat(grads, dim)` allocates the input's gradient (contiguous:
    /// `compute_output_memory_format` of non-4-D inputs); the zeros die with
    /// the vector when the function returns.
    fn apply_split(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let Backward::Split {
            dim,
            sizes,
            lengths,
        } = &self.kind
        else {
            unreachable!()
        };
        let mut out: Vec<Option<Tensor>> = vec![None; self.edges.len()];
        if !self.needs(0) {
            return Ok(out);
        }
        let Some(any) = grads.iter().flatten().next() else {
            return Ok(out);
        };
        let rt = any.rt().clone();
        let (dtype, device) = (any.dtype(), any.device());
        let mut zeros = Vec::new();
        for (j, len) in lengths.iter().enumerate() {
            if grads.get(j).is_none_or(|g| g.is_none()) {
                let mut s = *sizes;
                s.as_mut_slice()[*dim] = *len;
                zeros.push(rt.empty_op(&s, dtype, device, "zeros", Category::Temporary)?);
            }
        }
        let g = rt.empty_op(sizes, dtype, device, "cat", Category::Gradient)?;
        drop(zeros);
        out[0] = Some(g);
        Ok(out)
    }

    fn apply_custom(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let Backward::Custom {
            backward,
            num_saved,
            ..
        } = &self.kind
        else {
            unreachable!()
        };
        let saved: Vec<Tensor> = (0..*num_saved)
            .map(|i| self.saved(i))
            .collect::<Result<_>>()?;
        let mut r = backward(&saved, grads)?;
        drop(saved);
        r.resize(self.edges.len(), None);
        for (i, g) in r.iter_mut().enumerate() {
            if !self.needs(i) {
                *g = None;
            }
        }
        Ok(r)
    }
}
