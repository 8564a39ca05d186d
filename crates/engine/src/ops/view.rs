//! View ops: new geometry over the same storage (no allocation), except
//! `reshape`/`contiguous` when the geometry cannot be viewed, which copy.

use crate::autograd::{Backward, Pending};
use crate::dims::{compute_view_strides, contiguous_strides, within_limit, Dims, MAX_DIMS};
use crate::error::{shape_err, Result};
use crate::ops::empty_like;
use crate::runtime::Category;
use crate::tensor::Tensor;

fn infer_size(op: &'static str, shape: &[i64], numel: i64) -> Result<Dims> {
    let mut out = within_limit(op, shape)?;
    let mut infer = None;
    let mut prod = 1i64;
    for (i, &s) in shape.iter().enumerate() {
        if s == -1 {
            if infer.is_some() {
                return Err(shape_err(op, "only one dimension can be inferred"));
            }
            infer = Some(i);
        } else {
            prod *= s;
        }
    }
    if let Some(i) = infer {
        if prod == 0 || numel % prod != 0 {
            return Err(shape_err(
                op,
                format!("shape {shape:?} is invalid for input of size {numel}"),
            ));
        }
        out.as_mut_slice()[i] = numel / prod;
    } else if prod != numel {
        return Err(shape_err(
            op,
            format!("shape {shape:?} is invalid for input of size {numel}"),
        ));
    }
    Ok(out)
}

impl Tensor {
    fn view_op(
        &self,
        sizes: Dims,
        strides: Dims,
        offset: i64,
        kind: impl FnOnce() -> Backward,
    ) -> Tensor {
        let out = self.alias_with(sizes, strides, offset);
        if let Some(p) = Pending::begin(self.rt(), &[Some(self)]) {
            p.finish(kind(), &[&out]);
        }
        self.rt().count_op();
        out
    }

    /// `t.view(shape)` (`-1` allowed); an error when the strides do not allow it.
    pub fn view(&self, shape: &[i64]) -> Result<Tensor> {
        let shape = infer_size("view", shape, self.numel())?;
        let st = compute_view_strides(self.sizes(), self.strides(), &shape).ok_or_else(|| {
            shape_err(
                "view",
                "view size is not compatible with input tensor's size and stride; use .reshape(...) instead",
            )
        })?;
        let sizes = self.dims();
        Ok(
            self.view_op(shape, st, self.0.offset, || Backward::Reshape {
                sizes,
                name: "ViewBackward0",
            }),
        )
    }

    /// `t.reshape(shape)`: a view when possible (`_reshape_alias`), else
    /// `_unsafe_view(self.clone(contiguous), shape)`.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let shape = infer_size("reshape", shape, self.numel())?;
        if let Some(st) = compute_view_strides(self.sizes(), self.strides(), &shape) {
            let sizes = self.dims();
            return Ok(
                self.view_op(shape, st, self.0.offset, || Backward::Reshape {
                    sizes,
                    name: "ViewBackward0",
                }),
            );
        }
        let c = self.clone_contiguous()?;
        Ok(c.unsafe_view(&shape))
    }

    /// `at::_unsafe_view(t, shape)`: same storage, not tracked as a view.
    pub(crate) fn unsafe_view(&self, shape: &[i64]) -> Tensor {
        let st = contiguous_strides(shape);
        let out = crate::tensor::Tensor::from_parts(
            self.0.storage.clone(),
            Dims::new(shape),
            st,
            self.0.offset,
            self.dtype(),
            self.device(),
            self.0.version.clone(),
            false,
        );
        if let Some(p) = Pending::begin(self.rt(), &[Some(self)]) {
            p.finish(
                Backward::Reshape {
                    sizes: self.dims(),
                    name: "UnsafeViewBackward0",
                },
                &[&out],
            );
        }
        out
    }

    /// `t.clone(memory_format=torch.contiguous_format)`.
    pub fn clone_contiguous(&self) -> Result<Tensor> {
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let out = self.rt().empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            "clone",
            Category::Output,
        )?;
        if let Some(p) = pending {
            p.finish(Backward::Clone, &[&out]);
        }
        Ok(out)
    }

    /// `t.clone()` (`preserve_format`).
    pub fn clone_tensor(&self) -> Result<Tensor> {
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let out = empty_like(self, self.dtype(), "clone", Category::Output)?;
        if let Some(p) = pending {
            p.finish(Backward::Clone, &[&out]);
        }
        Ok(out)
    }

    /// `t.contiguous()`: `self` if already contiguous, else a contiguous clone.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            self.clone_contiguous()
        }
    }

    /// `t.transpose(d0, d1)`
    ///
    /// # Panics
    /// When a dim is out of range, with PyTorch's message (these views take
    /// the caller's constants; the ops that return a `Result` return it as
    /// an error).
    pub fn transpose(&self, d0: i64, d1: i64) -> Tensor {
        let (a, b) = (self.wrap_dim(d0), self.wrap_dim(d1));
        let mut s = self.dims();
        let mut st = Dims::new(self.strides());
        s.as_mut_slice().swap(a, b);
        st.as_mut_slice().swap(a, b);
        self.view_op(s, st, self.0.offset, || Backward::Transpose {
            d0: a,
            d1: b,
        })
    }

    /// `t.t()` (2-D transpose; `TBackward0`)
    pub fn t(&self) -> Tensor {
        if self.dim() < 2 {
            return self.view_op(
                self.dims(),
                Dims::new(self.strides()),
                self.0.offset,
                || Backward::T,
            );
        }
        let mut s = self.dims();
        let mut st = Dims::new(self.strides());
        s.as_mut_slice().swap(0, 1);
        st.as_mut_slice().swap(0, 1);
        self.view_op(s, st, self.0.offset, || Backward::T)
    }

    /// `t.permute(dims)`
    pub fn permute(&self, dims: &[usize]) -> Tensor {
        let mut s = Dims::default();
        let mut st = Dims::default();
        for &d in dims {
            s.push(self.sizes()[d]);
            st.push(self.strides()[d]);
        }
        let dims_v: Vec<usize> = dims.to_vec();
        self.view_op(s, st, self.0.offset, || Backward::Permute { dims: dims_v })
    }

    /// `t.expand(shape)` (`-1` keeps a size)
    pub fn expand(&self, shape: &[i64]) -> Result<Tensor> {
        let n = shape.len();
        if n < self.dim() {
            return Err(shape_err(
                "expand",
                "the number of sizes provided must be >= the tensor's dims",
            ));
        }
        let off = n - self.dim();
        let mut s = within_limit("expand", shape)?;
        let mut st = Dims::new(&vec![0; n]);
        for i in 0..n {
            if i >= off {
                let j = i - off;
                let cur = self.sizes()[j];
                if shape[i] == -1 || shape[i] == cur {
                    s.as_mut_slice()[i] = cur;
                    st.as_mut_slice()[i] = self.strides()[j];
                } else if cur == 1 {
                    st.as_mut_slice()[i] = 0;
                } else {
                    return Err(shape_err(
                        "expand",
                        format!("cannot expand {:?} to {shape:?}", self.sizes()),
                    ));
                }
            }
        }
        let sizes = self.dims();
        Ok(self.view_op(s, st, self.0.offset, || Backward::Expand { sizes }))
    }

    /// `t.unsqueeze(dim)`; a shape error on a tensor that already has
    /// [`MAX_DIMS`] dimensions.
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        if self.dim() >= MAX_DIMS {
            return Err(shape_err(
                "unsqueeze",
                format!("the eager twin supports at most {MAX_DIMS} dimensions"),
            ));
        }
        let n = self.dim() as i64 + 1;
        if dim < -n || dim >= n {
            return Err(shape_err(
                "unsqueeze",
                format!(
                    "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
                    -n,
                    n - 1
                ),
            ));
        }
        let d = (if dim < 0 { dim + n } else { dim }) as usize;
        let mut s = self.dims();
        let mut st = Dims::new(self.strides());
        let new_st = if d < self.dim() {
            self.sizes()[d] * self.strides()[d]
        } else {
            1
        };
        s.insert(d, 1);
        st.insert(d, new_st);
        Ok(self.view_op(s, st, self.0.offset, || Backward::Unsqueeze { dim: d }))
    }

    /// `t.squeeze(dim)` (no-op view when that size is not 1)
    ///
    /// # Panics
    /// When a dim is out of range, with PyTorch's message (these views take
    /// the caller's constants; the ops that return a `Result` return it as
    /// an error).
    pub fn squeeze_dim(&self, dim: i64) -> Tensor {
        let d = self.wrap_dim(dim);
        let mut s = self.dims();
        let mut st = Dims::new(self.strides());
        if self.dim() > 0 && s[d] == 1 {
            s.remove(d);
            st.remove(d);
        }
        let sizes = self.dims();
        self.view_op(s, st, self.0.offset, || Backward::Squeeze { dim: d, sizes })
    }

    /// `t.select(dim, index)` / `t[i]`
    ///
    /// # Panics
    /// When a dim is out of range, with PyTorch's message (these views take
    /// the caller's constants; the ops that return a `Result` return it as
    /// an error).
    pub fn select(&self, dim: i64, index: i64) -> Tensor {
        let d = self.wrap_dim(dim);
        let idx = if index < 0 {
            index + self.sizes()[d]
        } else {
            index
        };
        let mut s = self.dims();
        let mut st = Dims::new(self.strides());
        let off = self.0.offset + idx * st[d];
        s.remove(d);
        st.remove(d);
        let sizes = self.dims();
        self.view_op(s, st, off, || Backward::Select {
            dim: d,
            index: idx,
            sizes,
        })
    }

    /// `t.narrow(dim, start, length)` / `t[..., start:start+length]`
    ///
    /// # Panics
    /// When a dim is out of range, with PyTorch's message (these views take
    /// the caller's constants; the ops that return a `Result` return it as
    /// an error).
    pub fn narrow(&self, dim: i64, start: i64, length: i64) -> Tensor {
        let d = self.wrap_dim(dim);
        let mut s = self.dims();
        s.as_mut_slice()[d] = length;
        let off = self.0.offset + start * self.strides()[d];
        let sizes = self.dims();
        self.view_op(s, Dims::new(self.strides()), off, || Backward::Slice {
            dim: d,
            start,
            sizes,
        })
    }

    /// `t.unflatten(dim, sizes)` (a `view`)
    pub fn unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Tensor> {
        let d = self.try_wrap_dim("unflatten", dim)?;
        let mut shape: Vec<i64> = self.sizes()[..d].to_vec();
        shape.extend_from_slice(sizes);
        shape.extend_from_slice(&self.sizes()[d + 1..]);
        self.view(&shape)
    }

    /// `t.flatten()` (a `reshape` to 1-D; 0-dim becomes 1-D)
    pub fn flatten(&self) -> Result<Tensor> {
        if self.dim() == 1 {
            return Ok(self.clone());
        }
        self.reshape(&[-1])
    }

    /// `t.mT` (transpose of the last two dims)
    pub fn mt(&self) -> Tensor {
        self.transpose(-2, -1)
    }
}

#[cfg(test)]
mod tests {
    use crate::error::EngineError;
    use crate::{DType, Device, Runtime};

    fn is_shape_error<T: std::fmt::Debug>(r: crate::error::Result<T>, op: &str) -> bool {
        matches!(r, Err(EngineError::Shape { op: o, .. }) if o == op)
    }

    /// Shapes beyond what a simulated tensor can hold, or with a negative
    /// size, are errors of the op that met them, before anything is
    /// allocated: never a panic.
    #[test]
    fn a_shape_the_twin_cannot_hold_is_an_error() {
        let rt = Runtime::default();
        let nine = [1i64; 9];
        assert!(is_shape_error(
            rt.empty(&nine, DType::F32, Device::Cuda),
            "empty"
        ));
        assert!(is_shape_error(
            rt.zeros(&[2, -3], DType::F32, Device::Cuda),
            "zeros"
        ));
        // bytes past i64 (PyTorch: `Storage size calculation overflowed`),
        // and a tensor past 1 PiB
        let huge = rt.ones(&[1 << 62, 256], DType::F32, Device::Cuda);
        assert!(is_shape_error(huge, "ones"));
        // with PyTorch's message for `torch.empty(sys.maxsize, 2)`
        let Err(e) = rt.empty(&[i64::MAX, 2], DType::F32, Device::Cuda) else {
            panic!("an overflow")
        };
        assert!(
            e.to_string().ends_with(
                "Storage size calculation overflowed with sizes=[9223372036854775807, 2]"
            ),
            "{e}"
        );
        let huge = rt.empty(&[1 << 40, 1 << 20], DType::U8, Device::Cuda);
        assert!(is_shape_error(huge, "empty"));
        assert_eq!(rt.memory_allocated(), 0);
        let t = rt.empty(&[1; 8], DType::F32, Device::Cuda).unwrap();
        assert!(is_shape_error(t.unsqueeze(0), "unsqueeze"));
        assert!(is_shape_error(t.view(&nine), "view"));
        assert!(is_shape_error(t.reshape(&nine), "reshape"));
        assert!(is_shape_error(t.expand(&nine), "expand"));
        assert!(is_shape_error(t.new_full(&nine, DType::F32), "full"));
        let m = rt.empty(&[2, 3], DType::F32, Device::Cuda).unwrap();
        assert!(is_shape_error(m.unsqueeze(3), "unsqueeze"));
        assert!(is_shape_error(m.unsqueeze(-4), "unsqueeze"));
        assert_eq!(m.unsqueeze(-3).unwrap().sizes(), &[1, 2, 3]);
        assert_eq!(m.unsqueeze(2).unwrap().sizes(), &[2, 3, 1]);
        // what was allocated is the two tensors above
        assert_eq!(rt.memory_allocated(), 1024);
    }

    /// A dim out of range is a shape error with PyTorch's message where the
    /// op returns a `Result`, and a panic with that message in the views
    /// that do not (their dims are the caller's constants), never an index
    /// past the shape.
    #[test]
    fn a_dim_out_of_range_is_pytorchs_error() {
        use crate::tensor::Tensor;
        let rt = Runtime::default();
        let m = rt.empty(&[2, 3], DType::F32, Device::Cuda).unwrap();
        assert!(is_shape_error(m.sum_dims(&[2], false), "sum"));
        assert!(is_shape_error(m.softmax(-3), "softmax"));
        assert!(is_shape_error(m.log_softmax(2), "log_softmax"));
        assert!(is_shape_error(Tensor::cat(&[&m, &m], 2), "cat"));
        assert!(is_shape_error(m.cumsum(-3), "cumsum"));
        assert!(is_shape_error(m.unflatten(2, &[1, 3]), "unflatten"));
        let Err(e) = m.softmax(5) else { panic!() };
        assert!(
            e.to_string()
                .contains("Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
            "{e}"
        );
        // a 0-dim tensor takes dim 0 and -1 (PyTorch's maybe_wrap_dim)
        let scalar = rt.empty(&[], DType::F32, Device::Cuda).unwrap();
        assert_eq!(scalar.sum_dims(&[0], false).unwrap().sizes(), &[] as &[i64]);
        assert_eq!(scalar.sum_dims(&[-1], true).unwrap().sizes(), &[] as &[i64]);
        assert!(is_shape_error(scalar.sum_dims(&[1], false), "sum"));
        // in range, counted from either end
        assert_eq!(m.softmax(-2).unwrap().sizes(), &[2, 3]);
        assert_eq!(m.sum_dims(&[-1], false).unwrap().sizes(), &[2]);
        for view in [
            |m: &Tensor| m.transpose(0, 2),
            |m: &Tensor| m.select(-3, 0),
            |m: &Tensor| m.narrow(2, 0, 1),
            |m: &Tensor| m.slice(2, None, None),
        ] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| view(&m)));
            let Err(p) = r else { panic!("no panic") };
            let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains("Dimension out of range"), "{msg}");
        }
    }
}
