//! Matrix products: `mm`, `addmm`, `bmm`, and the composite `matmul` and
//! `linear` of `ATen/native/LinearAlgebra.cpp` / `Linear.cpp`, with the cuBLAS
//! and cuBLASLt workspaces their first call on a (thread, stream) allocates.

use crate::autograd::{Backward, MatMeta, Pending};
use crate::dims::Dims;
use crate::dtype::DType;
use crate::error::{shape_err, EngineError, Result};
use crate::runtime::Category;
use crate::tensor::Tensor;

/// `prepare_matrix_for_cublas` (`ATen/native/cuda/Blas.cpp`): a matrix
/// cuBLAS cannot address (neither dim of stride 1 with a valid leading
/// dimension, e.g. an expanded gradient) is copied contiguous first.
fn cublas_matrix_copy(t: &Tensor) -> Result<Option<Tensor>> {
    if t.is_non_overlapping_and_dense() {
        return Ok(None);
    }
    let (s, st) = (t.sizes(), t.strides());
    if (st[0] == 1 && st[1] >= s[0].max(1)) || (st[1] == 1 && st[0] >= s[1].max(1)) {
        return Ok(None);
    }
    let rt = t.rt().clone();
    rt.no_grad(|| {
        rt.empty_op(
            t.sizes(),
            t.dtype(),
            t.device(),
            "clone",
            Category::Temporary,
        )
    })
    .map(Some)
}

/// `prepare_batch_matrix_for_cublas` for a contiguous result (which makes
/// `transpose_result` true): `(m, n)` are the problem sizes it checks against.
fn cublas_batch_copy(t: &Tensor, m: i64, n: i64) -> Result<Option<Tensor>> {
    let st = t.strides();
    let (fast, lead) = (2, 1);
    if st[fast] == 1 && st[lead] >= m.max(1) {
        return Ok(None);
    }
    if st[lead] == 1 && st[fast] >= n.max(1) {
        return Ok(None);
    }
    if t.is_contiguous() && st[1] != 0 && st[2] != 0 {
        return Ok(None);
    }
    let rt = t.rt().clone();
    rt.no_grad(|| {
        rt.empty_op(
            t.sizes(),
            t.dtype(),
            t.device(),
            "clone",
            Category::Temporary,
        )
    })
    .map(Some)
}

/// `cublasCommonArgs(mat1, mat2, result)` for a contiguous result
/// (`transpose_result`): `mata` is prepared from `mat2`, then `matb` from
/// `mat1`; the gemm follows; the copies die with the args (`matb` first).
fn gemm_2d(op: &'static str, mat1: &Tensor, mat2: &Tensor, lt: bool) -> Result<()> {
    let a = cublas_matrix_copy(mat2)?;
    let b = cublas_matrix_copy(mat1)?;
    let rt = mat1.rt();
    if lt {
        rt.cublaslt_workspace(op, mat1.dtype())?;
    } else {
        rt.cublas_handle(op, mat1.dtype())?;
    }
    drop(b);
    drop(a);
    Ok(())
}

fn meta(t: &Tensor) -> MatMeta {
    MatMeta {
        sizes: t.dims(),
        strides: Dims::new(t.strides()),
    }
}

fn cannot_multiply(op: &'static str, a: &Tensor, b: &Tensor) -> EngineError {
    shape_err(
        op,
        format!("cannot multiply {:?} and {:?}", a.sizes(), b.sizes()),
    )
}

/// What a product's backward saves (`MmBackward0`, `BmmBackward0`,
/// `AddmmBackward0`): each operand for the other's gradient, `a` (input
/// `i`) when `b` (input `j`) needs a gradient and `b` when `a` does; `a`
/// first when `a_first`. Returns the slots of (`a`, `b`).
fn save_for_each_other(
    pending: &mut Option<Pending>,
    (a, i): (&Tensor, usize),
    (b, j): (&Tensor, usize),
    a_first: bool,
) -> (Option<usize>, Option<usize>) {
    let Some(p) = pending else {
        return (None, None);
    };
    let (mut sa, mut sb) = (None, None);
    if a_first && p.needs(j) {
        sa = Some(p.save(a));
    }
    if p.needs(i) {
        sb = Some(p.save(b));
    }
    if !a_first && p.needs(j) {
        sa = Some(p.save(a));
    }
    (sa, sb)
}

impl Tensor {
    /// `torch.mm(a, b)`: saves `mat2` if `self` requires grad and `self` if
    /// `mat2` does (`MmBackward0`: `self: mm_mat1_backward(grad, mat2, ...)`,
    /// `mat2: mm_mat2_backward(grad, self, ...)`).
    pub fn mm(&self, mat2: &Tensor) -> Result<Tensor> {
        crate::autocast!(self.rt(), "mm", [self, mat2] => |a| a.t(0).mm(a.t(1)));
        if self.dim() != 2 || mat2.dim() != 2 || self.sizes()[1] != mat2.sizes()[0] {
            return Err(cannot_multiply("mm", self, mat2));
        }
        let mut pending = Pending::begin(self.rt(), &[Some(self), Some(mat2)]);
        // `mat2` for `self`'s gradient, then `self` for `mat2`'s
        let slots = save_for_each_other(&mut pending, (self, 0), (mat2, 1), false);
        let rt = self.rt();
        let out = rt.empty_op(
            &[self.sizes()[0], mat2.sizes()[1]],
            self.dtype(),
            self.device(),
            "mm",
            Category::Output,
        )?;
        if out.numel() > 0 && self.sizes()[1] > 0 && self.device() == crate::dtype::Device::Cuda {
            gemm_2d("mm", self, mat2, false)?;
        }
        if let Some(p) = pending {
            p.finish(
                Backward::Mm {
                    self_: slots.0,
                    mat2: slots.1,
                    self_meta: meta(self),
                    mat2_meta: meta(mat2),
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `torch.addmm(bias, mat1, mat2)` (beta = alpha = 1): the cuBLASLt
    /// `gemm_and_bias` path when `isInputCompliesAddmmCudaLt`, else cuBLAS.
    pub fn addmm(bias: &Tensor, mat1: &Tensor, mat2: &Tensor) -> Result<Tensor> {
        crate::autocast!(mat1.rt(), "addmm", [bias, mat1, mat2] => |a| Tensor::addmm(a.t(0), a.t(1), a.t(2)));
        if mat1.dim() != 2 || mat2.dim() != 2 || mat1.sizes()[1] != mat2.sizes()[0] {
            return Err(cannot_multiply("addmm", mat1, mat2));
        }
        let mut pending = Pending::begin(mat1.rt(), &[Some(bias), Some(mat1), Some(mat2)]);
        // AddmmBackward0 saves mat1_ (for mat2's grad), then mat2_ (for mat1's)
        let slots = save_for_each_other(&mut pending, (mat1, 1), (mat2, 2), true);
        let rt = mat1.rt();
        let (m, n) = (mat1.sizes()[0], mat2.sizes()[1]);
        let out = rt.empty_op(
            &[m, n],
            mat1.dtype(),
            mat1.device(),
            "addmm",
            Category::Output,
        )?;
        let squeezed_1d = bias.sizes().iter().filter(|&&s| s != 1).count() <= 1;
        let use_lt = bias.is_contiguous()
            && (bias.dim() == 1 || squeezed_1d)
            && bias.sizes().last() == Some(&n)
            && matches!(
                mat1.dtype(),
                DType::F32 | DType::F64 | DType::F16 | DType::BF16
            )
            // `isInputCompliesAddmmCudaLt` (Blas.cpp, 2.11): only mat2 must have more than one row
            // and column (a batch-1 linear takes cuBLASLt too: blind45/as04's H200 history)
            && mat2.sizes()[0] > 1
            && n > 1;
        if out.numel() > 0 && mat1.sizes()[1] > 0 && mat1.device() == crate::dtype::Device::Cuda {
            gemm_2d("addmm", mat1, mat2, use_lt)?;
        }
        if let Some(p) = pending {
            p.finish(
                Backward::Addmm {
                    mat1: slots.0,
                    mat2: slots.1,
                    mat1_meta: meta(mat1),
                    mat2_meta: meta(mat2),
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `torch.bmm(a, b)`: `BmmBackward0` saves `mat2` for `self`'s grad and
    /// `self` for `mat2`'s.
    pub fn bmm(&self, mat2: &Tensor) -> Result<Tensor> {
        crate::autocast!(self.rt(), "bmm", [self, mat2] => |a| a.t(0).bmm(a.t(1)));
        if self.dim() != 3
            || mat2.dim() != 3
            || self.sizes()[2] != mat2.sizes()[1]
            || self.sizes()[0] != mat2.sizes()[0]
        {
            return Err(cannot_multiply("bmm", self, mat2));
        }
        let mut pending = Pending::begin(self.rt(), &[Some(self), Some(mat2)]);
        let slots = save_for_each_other(&mut pending, (self, 0), (mat2, 1), false);
        let rt = self.rt();
        let out = rt.empty_op(
            &[self.sizes()[0], self.sizes()[1], mat2.sizes()[2]],
            self.dtype(),
            self.device(),
            "bmm",
            Category::Output,
        )?;
        if out.numel() > 0 && self.sizes()[2] > 0 && self.device() == crate::dtype::Device::Cuda {
            // baddbmm_out_cuda_impl with transpose_result: batch1_ from mat2, batch2_ from self
            let (m, n, k) = (mat2.sizes()[2], self.sizes()[1], self.sizes()[2]);
            let a = cublas_batch_copy(mat2, m, k)?;
            let b = cublas_batch_copy(self, k, n)?;
            rt.cublas_handle("bmm", self.dtype())?;
            drop(b);
            drop(a);
        }
        if let Some(p) = pending {
            p.finish(
                Backward::Bmm {
                    self_: slots.0,
                    mat2: slots.1,
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// `torch.matmul(a, b)` as `_matmul_impl` decomposes it (the cases of
    /// 2-D, folded N-D @ 2-D and batched products).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        crate::autocast!(self.rt(), "matmul", [self, other] => |a| a.t(0).matmul(a.t(1)));
        let (d1, d2) = (self.dim(), other.dim());
        if d1 == 2 && d2 == 2 {
            return self.mm(other);
        }
        if d1 >= 3 && d2 == 2 && should_fold(self, other) {
            let sizes1 = self.sizes();
            let mut out_shape: Vec<i64> = sizes1[..d1 - 1].to_vec();
            let folded: i64 = out_shape.iter().product();
            out_shape.push(other.sizes()[1]);
            let t1 = self.reshape(&[folded, sizes1[d1 - 1]])?;
            let prod = t1.mm(other)?;
            drop(t1);
            return Ok(prod.unsafe_view(&out_shape));
        }
        if d1 >= 3 || d2 >= 3 {
            let n = self.sizes()[d1 - 2];
            let m1 = self.sizes()[d1 - 1];
            let (m2, p) = (other.sizes()[d2 - 2], other.sizes()[d2 - 1]);
            let b1 = &self.sizes()[..d1 - 2];
            let b2 = &other.sizes()[..d2.saturating_sub(2)];
            let batch = crate::dims::broadcast_shapes(b1, b2)
                .ok_or_else(|| shape_err("matmul", "batch dims do not broadcast"))?;
            let bp: i64 = batch.iter().product();
            let mut e1: Vec<i64> = batch.to_vec();
            e1.extend([n, m1]);
            let mut e2: Vec<i64> = batch.to_vec();
            e2.extend([m2, p]);
            let t1 = self.expand(&e1)?.reshape(&[bp, n, m1])?;
            let t2 = other.expand(&e2)?.reshape(&[bp, m2, p])?;
            let mut out_shape: Vec<i64> = batch.to_vec();
            out_shape.extend([n, p]);
            let prod = t1.bmm(&t2)?;
            drop(t1);
            drop(t2);
            return Ok(prod.unsafe_view(&out_shape));
        }
        Err(EngineErrorExt::unsupported("matmul with 1-D operands"))
    }

    /// `F.linear(x, w, b)` as ATen's `linear`: `addmm` for 2-D input with
    /// bias, `_flatten_nd_linear` for contiguous 3-D input with bias, else
    /// `matmul(x, w.t())` followed by an in-place `add_(bias)`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        crate::autocast!(self.rt(), "linear", [self, weight, bias] => |a| a.t(0).linear(a.t(1), a.opt(2)));
        let d = self.dim();
        if let Some(b) = bias {
            if d == 2 {
                let wt = weight.t();
                return Tensor::addmm(b, self, &wt);
            }
            if self.is_contiguous() && (d == 3 || b.dim() == 1) {
                // _flatten_nd_linear
                let sizes = self.sizes();
                let flat: i64 = sizes[..d - 1].iter().product();
                let inp = self.reshape(&[flat, sizes[d - 1]])?;
                let wt = weight.t();
                let res = Tensor::addmm(b, &inp, &wt)?;
                drop(wt);
                drop(inp);
                let mut shape: Vec<i64> = sizes[..d - 1].to_vec();
                shape.push(res.sizes()[1]);
                return res.view(&shape);
            }
        }
        let wt = weight.t();
        let out = self.matmul(&wt)?;
        drop(wt);
        if let Some(b) = bias {
            out.add_(b, 1.0)?;
        }
        Ok(out)
    }
}

/// `should_fold` of `LinearAlgebra.cpp` for `t1` (>= 3-D) @ `t2` (2-D).
fn should_fold(t1: &Tensor, t2: &Tensor) -> bool {
    if t2.requires_grad() {
        return true;
    }
    if t1.numel() == 0 {
        return true;
    }
    let (s, st) = (t1.sizes(), t1.strides());
    for i in 0..t1.dim() - 2 {
        if st[i] != st[i + 1] * s[i + 1] {
            return false;
        }
    }
    true
}

struct EngineErrorExt;
impl EngineErrorExt {
    fn unsupported(what: &str) -> crate::error::EngineError {
        crate::error::EngineError::Unsupported {
            what: what.to_string(),
        }
    }
}
