//! Sizes and strides: a small inline vector and the geometry rules of
//! `c10/core/TensorImpl.cpp`, `ATen/TensorUtils.cpp` (`computeStride`) and
//! `ATen/TensorIterator.cpp` (output layout).

use std::fmt;
use std::ops::Deref;

/// The most dimensions a simulated tensor may have.
pub const MAX_DIMS: usize = 8;

/// Sizes or strides of a tensor, stored inline (no heap allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dims {
    len: u8,
    v: [i64; MAX_DIMS],
}

impl Dims {
    /// Dims from a slice.
    ///
    /// # Panics
    /// If the slice has more than [`MAX_DIMS`] entries.
    pub fn new(s: &[i64]) -> Self {
        assert!(
            s.len() <= MAX_DIMS,
            "at most {MAX_DIMS} dimensions are supported"
        );
        let mut v = [0; MAX_DIMS];
        v[..s.len()].copy_from_slice(s);
        Dims {
            len: s.len() as u8,
            v,
        }
    }
    /// Dims from a slice, or `None` when it has more than [`MAX_DIMS`]
    /// entries.
    pub fn try_new(s: &[i64]) -> Option<Self> {
        (s.len() <= MAX_DIMS).then(|| Self::new(s))
    }
    /// Append one entry.
    pub fn push(&mut self, x: i64) {
        assert!(
            (self.len as usize) < MAX_DIMS,
            "at most {MAX_DIMS} dimensions are supported"
        );
        self.v[self.len as usize] = x;
        self.len += 1;
    }
    /// Insert an entry at `i`.
    pub fn insert(&mut self, i: usize, x: i64) {
        let n = self.len as usize;
        assert!(n < MAX_DIMS && i <= n);
        self.v.copy_within(i..n, i + 1);
        self.v[i] = x;
        self.len += 1;
    }
    /// Remove the entry at `i`.
    pub fn remove(&mut self, i: usize) -> i64 {
        let n = self.len as usize;
        let x = self.v[i];
        self.v.copy_within(i + 1..n, i);
        self.len -= 1;
        x
    }
    /// Mutable access to the entries.
    pub fn as_mut_slice(&mut self) -> &mut [i64] {
        &mut self.v[..self.len as usize]
    }
    /// Number of elements described by these sizes.
    pub fn numel(&self) -> i64 {
        self.iter().product()
    }
}

/// A shape error for `op` when `shape` has more dimensions than a simulated
/// tensor may have (PyTorch allows up to 64; no model here needs more than
/// [`MAX_DIMS`]) or a negative size (PyTorch's `Trying to create tensor
/// with negative dimension`; `-1` is for the callers that infer a size to
/// replace first).
#[inline]
pub(crate) fn check_shape(op: &'static str, shape: &[i64]) -> crate::error::Result<()> {
    if shape.len() > MAX_DIMS || shape.iter().any(|&d| d < 0) {
        return Err(shape_error(op, shape));
    }
    Ok(())
}

#[cold]
fn shape_error(op: &'static str, shape: &[i64]) -> crate::error::EngineError {
    match shape.iter().find(|&&d| d < 0) {
        Some(d) => crate::error::shape_err(
            op,
            format!("Trying to create tensor with negative dimension {d}: {shape:?}"),
        ),
        None => too_many(op, shape),
    }
}

#[cold]
fn too_many(op: &'static str, shape: &[i64]) -> crate::error::EngineError {
    crate::error::shape_err(
        op,
        format!(
            "{} dimensions ({shape:?}); the eager twin supports at most {MAX_DIMS}",
            shape.len()
        ),
    )
}

/// `shape` as [`Dims`] for `op`, sizes unchecked: a shape error when it has
/// more than [`MAX_DIMS`] dimensions.
pub(crate) fn within_limit(op: &'static str, shape: &[i64]) -> crate::error::Result<Dims> {
    Dims::try_new(shape).ok_or_else(|| too_many(op, shape))
}

impl Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.v[..self.len as usize]
    }
}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<&[i64]> for Dims {
    fn from(s: &[i64]) -> Self {
        Dims::new(s)
    }
}

impl<const N: usize> From<[i64; N]> for Dims {
    fn from(s: [i64; N]) -> Self {
        Dims::new(&s)
    }
}

impl<const N: usize> From<&[i64; N]> for Dims {
    fn from(s: &[i64; N]) -> Self {
        Dims::new(s)
    }
}

/// Row-major strides for `sizes`.
pub fn contiguous_strides(sizes: &[i64]) -> Dims {
    let mut st = Dims::new(sizes);
    let mut acc = 1i64;
    for i in (0..sizes.len()).rev() {
        st.as_mut_slice()[i] = acc;
        // (saturating: a shape past i64 elements gets a stride the storage
        // size check refuses, `Storage size calculation overflowed`)
        acc = acc.saturating_mul(sizes[i].max(1));
    }
    st
}

/// `TensorImpl::compute_contiguous`.
pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for i in (0..sizes.len()).rev() {
        if sizes[i] == 0 {
            return true;
        }
        if sizes[i] != 1 {
            if strides[i] != expected {
                return false;
            }
            expected *= sizes[i];
        }
    }
    true
}

/// `TensorImpl::compute_non_overlapping_and_dense`.
pub fn is_non_overlapping_and_dense(sizes: &[i64], strides: &[i64]) -> bool {
    let n = sizes.len();
    if n == 1 {
        return sizes[0] < 2 || strides[0] == 1;
    }
    let mut perm: Vec<usize> = (0..n).collect();
    perm.sort_by(|&a, &b| {
        if sizes[a] < 2 {
            return std::cmp::Ordering::Greater;
        }
        if sizes[b] < 2 {
            return std::cmp::Ordering::Less;
        }
        strides[a].cmp(&strides[b])
    });
    let mut require = 1i64;
    for &d in &perm {
        let s = sizes[d];
        if s < 2 {
            return true;
        }
        if strides[d] != require {
            return false;
        }
        require *= s;
    }
    true
}

/// `at::detail::computeStride`: the strides a view of `newshape` would have,
/// or `None` when the reshape needs a copy.
pub fn compute_view_strides(oldshape: &[i64], oldstride: &[i64], newshape: &[i64]) -> Option<Dims> {
    let numel: i64 = oldshape.iter().product();
    let mut newstride = Dims::new(newshape);
    if oldshape.is_empty() {
        for s in newstride.as_mut_slice() {
            *s = 1;
        }
        return Some(newstride);
    }
    if numel == 0 && oldshape == newshape {
        return Some(Dims::new(oldstride));
    }
    if numel == 0 {
        return Some(contiguous_strides(newshape));
    }
    let mut view_d = newshape.len() as i64 - 1;
    let mut chunk_base_stride = *oldstride.last().unwrap();
    let mut tensor_numel = 1i64;
    let mut view_numel = 1i64;
    let mut tensor_d = oldshape.len() as i64 - 1;
    while tensor_d >= 0 {
        let td = tensor_d as usize;
        tensor_numel *= oldshape[td];
        if tensor_d == 0
            || (oldshape[td - 1] != 1 && oldstride[td - 1] != tensor_numel * chunk_base_stride)
        {
            while view_d >= 0 && (view_numel < tensor_numel || newshape[view_d as usize] == 1) {
                newstride.as_mut_slice()[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= newshape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = oldstride[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
        tensor_d -= 1;
    }
    if view_d != -1 {
        return None;
    }
    Some(newstride)
}

/// `infer_size` for broadcasting two shapes; `None` if incompatible.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Dims> {
    let n = a.len().max(b.len());
    let mut out = Dims::new(&vec![0; n]);
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out.as_mut_slice()[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// The strides of `t` expanded (broadcast) to `shape` (0 where broadcast).
pub fn expand_strides(sizes: &[i64], strides: &[i64], shape: &[i64]) -> Dims {
    let n = shape.len();
    let off = n - sizes.len();
    let mut st = Dims::new(&vec![0; n]);
    for (i, (&target, out)) in shape.iter().zip(st.as_mut_slice()).enumerate().skip(off) {
        let j = i - off;
        *out = if sizes[j] == 1 && target != 1 {
            0
        } else {
            strides[j]
        };
    }
    st
}

/// `at::infer_dense_strides(sizes, strides)` (ATen/ExpandUtils.cpp): dense,
/// non-overlapping strides in the stride order of a non-dense tensor (the
/// layout `empty_like`/`clone`/`_to_copy` give under `MemoryFormat::Preserve`
/// when the input is not non-overlapping-and-dense). `perm` starts as
/// n-1..0 and is insertion-sorted, fastest dim first: a 0 stride is
/// ambiguous (the dim does not move past it), a smaller stride goes first,
/// on equal strides the larger size goes later.
pub fn infer_dense_strides(sizes: &[i64], strides: &[i64]) -> Dims {
    let n = sizes.len();
    let mut out = Dims::new(&vec![0; n]);
    if n == 0 {
        return out;
    }
    if n == 1 {
        out.as_mut_slice()[0] = 1;
        return out;
    }
    let mut perm: Vec<usize> = (0..n).rev().collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        let (s0, s1) = (strides[d0], strides[d1]);
        if s0 == 0 || s1 == 0 {
            0
        } else if s0 < s1 {
            -1
        } else if s0 > s1 || sizes[d0] > sizes[d1] {
            1
        } else {
            0
        }
    };
    for i in 1..n {
        let mut dim1 = i;
        for dim0 in (0..i).rev() {
            let c = should_swap(perm[dim0], perm[dim1]);
            if c > 0 {
                perm.swap(dim0, dim1);
                dim1 = dim0;
            } else if c < 0 {
                break;
            }
        }
    }
    let mut acc = 1i64;
    for &d in &perm {
        out.as_mut_slice()[d] = acc;
        if sizes[d] > 1 {
            acc *= sizes[d];
        }
    }
    out
}

/// The output strides TensorIterator gives a freshly allocated output of
/// `shape` computed from `inputs` (sizes, strides), as
/// `TensorIteratorBase::compute_fast_setup_type` / `reorder_dimensions` /
/// `compute_strides` decide them.
pub fn iterator_output_strides(shape: &[i64], inputs: &[(&[i64], &[i64])]) -> Dims {
    let n = shape.len();
    // fast setup: all inputs of the full shape contiguous -> contiguous
    let all_contig = inputs.iter().all(|(s, st)| {
        (*s == shape || s.iter().product::<i64>() == 1 && s.len() <= n) && is_contiguous(s, st)
    });
    if all_contig {
        return contiguous_strides(shape);
    }
    // non-overlapping-and-dense with identical strides and full shape
    if let Some((s0, st0)) = inputs.first() {
        if *s0 == shape
            && is_non_overlapping_and_dense(s0, st0)
            && inputs.iter().all(|(s, st)| *s == shape && st == st0)
        {
            return Dims::new(st0);
        }
    }
    // general case: permutation from the operands' strides (fastest first)
    let bstrides: Vec<Dims> = inputs
        .iter()
        .map(|(s, st)| expand_strides(s, st, shape))
        .collect();
    // perm[0] is the fastest-moving dim; start with reversed order
    let mut perm: Vec<usize> = (0..n).rev().collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        for st in &bstrides {
            let s0 = st[d0];
            let s1 = st[d1];
            if s0 == 0 || s1 == 0 {
                continue;
            } else if s0 < s1 {
                return -1;
            } else if s0 > s1 {
                return 1;
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    for i in 1..n {
        let mut dim1 = i;
        let mut dim0 = i as i64 - 1;
        while dim0 >= 0 {
            let c = should_swap(perm[dim0 as usize], perm[dim1]);
            if c > 0 {
                perm.swap(dim0 as usize, dim1);
                dim1 = dim0 as usize;
            } else if c < 0 {
                break;
            }
            dim0 -= 1;
        }
    }
    let mut out = Dims::new(&vec![0; n]);
    let mut acc = 1i64;
    for &d in &perm {
        out.as_mut_slice()[d] = acc;
        acc *= shape[d].max(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_of_transposed_needs_copy() {
        // (512, 8, 1024) transposed from (8, 512, 1024)
        let sizes = [512, 8, 1024];
        let strides = [1024, 512 * 1024, 1];
        assert!(compute_view_strides(&sizes, &strides, &[4096, 1024]).is_none());
        let c = contiguous_strides(&[8, 512, 1024]);
        assert_eq!(
            &*compute_view_strides(&[8, 512, 1024], &c, &[4096, 1024]).unwrap(),
            &[1024, 1]
        );
    }

    #[test]
    fn dense_strides_keep_the_stride_order() {
        // ATen's own example (ExpandUtils.cpp): size/stride (6,5,4,3,2)/(6,0,120,0,1)
        // sorts perm to (4,3,0,1,2)
        assert_eq!(
            &*infer_dense_strides(&[6, 5, 4, 3, 2], &[6, 0, 120, 0, 1]),
            &[6, 36, 180, 2, 1]
        );
        // a head-transposed chunk of a packed projection: (B,H,T,D) with the
        // (B,T,3C) parent's strides keeps (B,T,H,D) order
        let (b, h, t, d) = (2, 12, 64, 64);
        let c = h * d;
        assert_eq!(
            &*infer_dense_strides(&[b, h, t, d], &[t * 3 * c, d, 3 * c, 1]),
            &[t * c, d, c, 1]
        );
        // an expanded (0-stride) dim does not move
        assert_eq!(&*infer_dense_strides(&[4, 3], &[0, 1]), &[3, 1]);
    }

    #[test]
    fn iterator_layout_follows_first_input() {
        let shape = [8, 512, 1024];
        let contig = contiguous_strides(&shape);
        let tr = [1024, 8 * 1024, 1];
        assert_eq!(
            iterator_output_strides(&shape, &[(&shape, &contig), (&shape, &tr)]),
            contig
        );
        assert_eq!(
            &*iterator_output_strides(&shape, &[(&shape, &tr), (&shape, &contig)]),
            &tr
        );
    }
}
