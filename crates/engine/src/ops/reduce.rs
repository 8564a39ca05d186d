//! Reductions (`sum`, `mean`) and the scratch their CUDA kernel allocates:
//! `gpu_reduce_kernel` (`ATen/native/cuda/Reduce.cuh`) allocates a global
//! accumulation buffer and semaphores through the caching allocator when
//! `setReduceConfig` splits the input across CTAs.

use crate::autograd::{Backward, Pending};
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::runtime::{Category, DeviceProfile, Runtime};
use crate::tensor::Tensor;

/// The reduction launch geometry that decides the scratch sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReduceScratch {
    /// `config.global_memory_size()` bytes (0: no global reduce)
    pub buffer: u64,
    /// `config.semaphore_size()` bytes
    pub semaphores: u64,
}

fn last_pow2(n: i64) -> i64 {
    let mut p = 1i64;
    while p * 2 <= n {
        p *= 2;
    }
    p
}

fn div_up(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// One TensorIterator dimension of a reduction: size, input stride (bytes),
/// whether it is reduced.
#[derive(Clone, Copy, Debug)]
struct RDim {
    size: i64,
    in_stride: i64,
    out_stride: i64,
}

/// Build the reordered, coalesced TensorIterator dims of a reduction of
/// `sizes`/`strides` (elements) over `reduced` dims.
fn iterator_dims(sizes: &[i64], strides: &[i64], reduced: &[bool], elem: i64) -> Vec<RDim> {
    // output strides: contiguous over kept dims, 0 over reduced
    let n = sizes.len();
    let mut out_st = vec![0i64; n];
    let mut acc = elem;
    for i in (0..n).rev() {
        if !reduced[i] {
            out_st[i] = acc;
            acc *= sizes[i];
        }
    }
    let mut dims: Vec<RDim> = (0..n)
        .map(|i| RDim {
            size: sizes[i],
            in_stride: strides[i] * elem,
            out_stride: if reduced[i] { 0 } else { out_st[i] },
        })
        .collect();
    // perm: fastest first; start reversed, insertion sort with should_swap
    dims.reverse();
    let should_swap = |a: &RDim, b: &RDim| -> i32 {
        // operand 0: the output (reduction rule first)
        let (s0, s1) = (a.out_stride, b.out_stride);
        if (s0 == 0) != (s1 == 0) {
            return if s1 == 0 { 1 } else { -1 };
        }
        for (s0, s1) in [(a.out_stride, b.out_stride), (a.in_stride, b.in_stride)] {
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 < s1 {
                return -1;
            }
            if s0 > s1 {
                return 1;
            }
            if a.size > b.size {
                return 1;
            }
        }
        0
    };
    for i in 1..dims.len() {
        let mut d1 = i;
        let mut d0 = i as i64 - 1;
        while d0 >= 0 {
            let c = should_swap(&dims[d0 as usize], &dims[d1]);
            if c > 0 {
                dims.swap(d0 as usize, d1);
                d1 = d0 as usize;
            } else if c < 0 {
                break;
            }
            d0 -= 1;
        }
    }
    // coalesce
    let mut out: Vec<RDim> = Vec::new();
    for d in dims {
        if d.size == 1 {
            continue;
        }
        if let Some(prev) = out.last_mut() {
            if prev.in_stride * prev.size == d.in_stride
                && prev.out_stride * prev.size == d.out_stride
            {
                prev.size *= d.size;
                continue;
            }
        }
        out.push(d);
    }
    out
}

/// `setReduceConfig` + `global_memory_size()`/`semaphore_size()` for a
/// float-accumulating reduction with `vt0 = input_vec_size = 4`.
fn reduce_config(
    dims: &[RDim],
    elem: i64,
    acc_size: i64,
    profile: &DeviceProfile,
) -> ReduceScratch {
    let num_reduce = dims.iter().filter(|d| d.out_stride == 0).count();
    let numel: i64 = dims.iter().map(|d| d.size).product();
    let num_outputs: i64 = dims
        .iter()
        .filter(|d| d.out_stride != 0)
        .map(|d| d.size)
        .product();
    let inputs_per_output = numel / num_outputs.max(1);
    let ndim = dims.len();
    let (reduction_on_fastest, mut dim0, dim1, fastest_stride);
    if ndim > 0 {
        reduction_on_fastest = num_reduce == ndim || dims[0].in_stride < dims[num_reduce].in_stride;
        if reduction_on_fastest {
            dim0 = inputs_per_output;
            dim1 = num_outputs;
            fastest_stride = dims[0].in_stride;
        } else {
            dim0 = num_outputs;
            dim1 = inputs_per_output;
            fastest_stride = dims[num_reduce].in_stride;
        }
    } else {
        reduction_on_fastest = true;
        fastest_stride = elem;
        dim0 = 1;
        dim1 = 1;
    }
    let input_vec_size = 4;
    let mut output_vec_size = 1i64;
    if fastest_stride == elem {
        if reduction_on_fastest && dim0 >= 128 && num_reduce == 1 {
            dim0 /= input_vec_size;
        } else if !reduction_on_fastest {
            // get_output_vec_size: allocations are 512-byte aligned
            let mut v = 4i64;
            let mut upd = |n: i64| {
                while n % v != 0 {
                    v /= 2;
                }
            };
            upd(dims[num_reduce].size);
            for (j, d) in dims.iter().enumerate() {
                if j != num_reduce {
                    upd(d.in_stride / elem);
                }
            }
            output_vec_size = v;
            dim0 /= output_vec_size;
        }
    }
    // set_block_dimension
    let max_threads = 512 / output_vec_size;
    let d0p = if dim0 < max_threads {
        last_pow2(dim0)
    } else {
        max_threads
    };
    let d1p = if dim1 < max_threads {
        last_pow2(dim1)
    } else {
        max_threads
    };
    let warp = 32;
    let mut bw = d0p.min(warp);
    let bh = d1p.min(max_threads / bw);
    bw = d0p.min(max_threads / bh);
    let num_threads = bw * bh;
    let mut step_input = 1i64;
    let mut step_output = 1i64;
    let mut input_mult = [0i64; 3];
    if ndim == 0 || reduction_on_fastest {
        input_mult[0] = step_input;
        step_input *= bw;
    } else {
        step_output *= bw;
    }
    let values_per_thread = |si: i64| div_up(inputs_per_output, si);
    let warp_split_threshold = (bh * 16).min(256);
    if values_per_thread(step_input) >= warp_split_threshold {
        input_mult[1] = step_input;
        step_input *= bh;
    } else {
        step_output *= bh;
    }
    let blocks_per_sm = profile.max_threads_per_sm as i64 / num_threads;
    let target_grid = profile.sm_count as i64 * blocks_per_sm;
    let grid_x = div_up(num_outputs / output_vec_size, step_output);
    let mut ctas = 1i64;
    if input_mult[1] != 0 && values_per_thread(step_input) >= 256 && grid_x <= target_grid {
        let c1 = div_up(target_grid, grid_x);
        let c2 = div_up(values_per_thread(step_input), 16);
        let c3 = div_up(values_per_thread(step_input), 256);
        ctas = c1.min(c2).max(c3);
        if ctas > 1 {
            input_mult[2] = step_input;
        }
    }
    if input_mult[2] == 0 {
        return ReduceScratch {
            buffer: 0,
            semaphores: 0,
        };
    }
    let mut size = acc_size * num_outputs * ctas;
    if input_mult[0] == 0 {
        size *= bw * output_vec_size;
    }
    ReduceScratch {
        buffer: size as u64,
        semaphores: 4 * grid_x as u64,
    }
}

/// Split the iterator until every piece addresses < 2^31 bytes
/// (`TensorIteratorBase::with_32bit_indexing`): halve the dim with the
/// largest extent.
fn split_32bit(dims: Vec<RDim>, elem: i64) -> Vec<Vec<RDim>> {
    let max_off = |ds: &[RDim]| -> i64 {
        let a: i64 = 1 + ds.iter().map(|d| (d.size - 1) * d.in_stride).sum::<i64>();
        let b: i64 = 1 + ds.iter().map(|d| (d.size - 1) * d.out_stride).sum::<i64>();
        a.max(b)
    };
    let _ = elem;
    let mut todo = vec![dims];
    let mut done = Vec::new();
    while let Some(ds) = todo.pop() {
        if max_off(&ds) <= i32::MAX as i64 || ds.iter().all(|d| d.size <= 1) {
            done.push(ds);
            continue;
        }
        // get_dim_to_split: the dim with the largest size*stride over operands
        let mut best = 0;
        let mut best_ext = -1;
        for (i, d) in ds.iter().enumerate() {
            if d.size >= 2 {
                let ext = (d.size * d.in_stride).max(d.size * d.out_stride);
                if ext >= best_ext {
                    best_ext = ext;
                    best = i;
                }
            }
        }
        let mut a = ds.clone();
        let mut b = ds;
        let half = a[best].size / 2;
        a[best].size = half;
        b[best].size -= half;
        // first half processed first
        todo.push(b);
        todo.push(a);
    }
    done
}

/// The scratch each launch of a reduction of `t` over `reduced` would allocate.
#[cfg(test)]
pub(crate) fn reduce_scratch(
    rt: &Runtime,
    t: &Tensor,
    reduced: &[bool],
    acc: DType,
) -> Vec<ReduceScratch> {
    let profile = rt.st.borrow().profile.clone();
    reduce_scratch_of(
        t.sizes(),
        t.strides(),
        reduced,
        t.dtype().size() as i64,
        acc.size() as i64,
        &profile,
    )
}

/// The scratch each launch of a reduction would allocate, from the input's sizes and strides (elements),
/// element and accumulator bytes.
pub(crate) fn reduce_scratch_of(
    sizes: &[i64],
    strides: &[i64],
    reduced: &[bool],
    elem: i64,
    acc: i64,
    profile: &DeviceProfile,
) -> Vec<ReduceScratch> {
    let dims = iterator_dims(sizes, strides, reduced, elem);
    split_32bit(dims, elem)
        .iter()
        .map(|ds| reduce_config(ds, elem, acc, profile))
        .collect()
}

/// Allocate the scratch of a reduction of `t` over `reduced` (each launch's
/// buffer and semaphores, freed at once, as `gpu_reduce_kernel` does), with
/// their rules.
pub(crate) fn alloc_reduce_scratch(
    rt: &Runtime,
    t: &Tensor,
    reduced: &[bool],
    acc: DType,
    op: &'static str,
) -> Result<()> {
    alloc_reduce_scratch_sized(rt, t, reduced, acc.size() as i64, op)
}

/// [`alloc_reduce_scratch`] for an accumulator of `acc` bytes (argmax's
/// `thrust::pair<acc_t, int64_t>`).
fn alloc_reduce_scratch_sized(
    rt: &Runtime,
    t: &Tensor,
    reduced: &[bool],
    acc: i64,
    op: &'static str,
) -> Result<()> {
    let profile = rt.st.borrow().profile.clone();
    let scratch = reduce_scratch_of(
        t.sizes(),
        t.strides(),
        reduced,
        t.dtype().size() as i64,
        acc,
        &profile,
    );
    for (index, sc) in scratch.iter().enumerate() {
        if sc.buffer > 0 {
            let rule = |semaphores| crate::scratch::ScratchRule::Reduce {
                sizes: t.sizes().to_vec(),
                strides: t.strides().to_vec(),
                reduced: reduced.to_vec(),
                elem: t.dtype().size() as i64,
                acc,
                index,
                semaphores,
            };
            let buf = rt.scratch(sc.buffer, rule(false), op)?;
            let sem = rt.scratch(sc.semaphores, rule(true), op)?;
            drop(sem);
            drop(buf);
        }
    }
    Ok(())
}

impl Tensor {
    fn reduce(&self, op: &'static str, dims: &[i64], keepdim: bool, mean: bool) -> Result<Tensor> {
        let all = dims.is_empty();
        let mut reduced = vec![all; self.dim()];
        for &d in dims {
            let d = self.try_wrap_dim(op, d)?;
            // (a 0-dim tensor takes dim 0 or -1 and has nothing to reduce)
            if let Some(r) = reduced.get_mut(d) {
                *r = true;
            }
        }
        let pending = Pending::begin(self.rt(), &[Some(self)]);
        let mut out_shape = Dims::default();
        for (i, &s) in self.sizes().iter().enumerate() {
            if !reduced[i] {
                out_shape.push(s);
            } else if keepdim {
                out_shape.push(1);
            }
        }
        let rt = self.rt().clone();
        let out = rt.empty_op(
            &out_shape,
            self.dtype(),
            self.device(),
            op,
            Category::Output,
        )?;
        if self.device() == Device::Cuda && self.numel() > 0 {
            alloc_reduce_scratch(&rt, self, &reduced, self.dtype().acc_type(), op)?;
        }
        if let Some(p) = pending {
            let dims_v: Vec<usize> = (0..self.dim()).filter(|&i| reduced[i]).collect();
            p.finish(
                Backward::Reduce {
                    sizes: self.dims(),
                    dims: dims_v,
                    keepdim,
                    all,
                    mean,
                    numel: self.numel(),
                },
                &[&out],
            );
        }
        Ok(out)
    }

    /// A reduction with an output of `out` dtype whose accumulator takes
    /// `acc` bytes (`Reduce.cuh`'s staging and semaphores when it splits an
    /// output across blocks).
    fn reduce_as(&self, op: &'static str, dims: &[i64], out: DType, acc: i64) -> Result<Tensor> {
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: format!("{op} with autograd"),
            });
        }
        let mut reduced = vec![dims.is_empty(); self.dim()];
        for &d in dims {
            let d = self.try_wrap_dim(op, d)?;
            if let Some(r) = reduced.get_mut(d) {
                *r = true;
            }
        }
        let shape: Vec<i64> = (0..self.dim())
            .filter(|&i| !reduced[i])
            .map(|i| self.sizes()[i])
            .collect();
        let rt = self.rt().clone();
        let o = rt.empty_op(&shape, out, self.device(), op, Category::Output)?;
        if self.device() == Device::Cuda && self.numel() > 0 {
            alloc_reduce_scratch_sized(&rt, self, &reduced, acc, op)?;
        }
        Ok(o)
    }

    /// `t.argmax(dim)`: int64 indices; the kernel reduces
    /// `thrust::pair<acc_t, int64_t>` (`ReduceArgMaxKernel.cu`).
    pub fn argmax_dim(&self, dim: i64) -> Result<Tensor> {
        let acc = self.dtype().acc_type().size() as i64;
        self.reduce_as("argmax", &[dim], DType::I64, acc.max(8) + 8)
    }

    /// `torch.linalg.vector_norm(t, 2, dims, keepdim)` (what `t.norm(2)` and
    /// `torch.norm(t, dim=d, keepdim=k)` call): an output of `t`'s dtype and
    /// the reduction's scratch with a float accumulator (`norm_kernel_cuda`);
    /// over dims of size 1 only, `abs` into the output (`linalg_vector_norm_out`'s
    /// `is_reduce_over_1D_vector`). No autograd.
    pub fn vector_norm(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        const OP: &str = "linalg_vector_norm";
        let mut reduced = vec![dims.is_empty(); self.dim()];
        for &d in dims {
            let d = self.try_wrap_dim(OP, d)?;
            if let Some(r) = reduced.get_mut(d) {
                *r = true;
            }
        }
        if self.rt().is_grad_enabled() && self.requires_grad() {
            return Err(EngineError::Unsupported {
                what: format!("{OP} with autograd"),
            });
        }
        let shape: Vec<i64> = (0..self.dim())
            .filter_map(|i| match (reduced[i], keepdim) {
                (false, _) => Some(self.sizes()[i]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let rt = self.rt().clone();
        let o = rt.empty_op(&shape, self.dtype(), self.device(), OP, Category::Output)?;
        let over_ones = (0..self.dim()).all(|i| !reduced[i] || self.sizes()[i] == 1);
        if self.device() == Device::Cuda && self.numel() > 0 && !over_ones {
            alloc_reduce_scratch(&rt, self, &reduced, self.dtype().acc_type(), OP)?;
        }
        Ok(o)
    }

    /// `t.any()` / `t.any(dim)`: bool (`or_kernel_cuda` reduces bools).
    pub fn any_dims(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce_as("any", dims, DType::Bool, 1)
    }

    /// `t.sum()`
    pub fn sum(&self) -> Result<Tensor> {
        self.reduce("sum", &[], false, false)
    }
    /// `t.sum(dims, keepdim)`
    pub fn sum_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce("sum", dims, keepdim, false)
    }
    /// `t.mean()`
    pub fn mean(&self) -> Result<Tensor> {
        self.reduce("mean", &[], false, true)
    }
    /// `t.mean(dims, keepdim)`
    pub fn mean_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce("mean", dims, keepdim, true)
    }

    /// `at::sum_to(t, shape)`: sum the broadcast dims (keepdim) and view to
    /// `shape`; `self` when nothing to reduce.
    pub(crate) fn sum_to(&self, shape: &[i64]) -> Result<Tensor> {
        let sizes = self.sizes();
        let lead = sizes.len() - shape.len();
        let mut dims = Vec::new();
        for i in 0..lead {
            dims.push(i as i64);
        }
        for i in lead..sizes.len() {
            if shape[i - lead] == 1 && sizes[i] != 1 {
                dims.push(i as i64);
            }
        }
        let t = if dims.is_empty() {
            self.clone()
        } else {
            self.sum_dims(&dims, true)?
        };
        if lead > 0 {
            t.view(shape)
        } else {
            Ok(t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(sizes: &[i64], reduced: &[bool]) -> ReduceScratch {
        let st = crate::dims::contiguous_strides(sizes);
        let dims = iterator_dims(sizes, &st, reduced, 4);
        reduce_config(&dims, 4, 4, &DeviceProfile::h100_torch_2_11())
    }

    #[test]
    fn bias_grad_reductions_match_the_h100_snapshot() {
        // sum over dim 0 of (4096, 1024): 32 MiB buffer, 32 B of semaphores
        assert_eq!(
            scratch(&[4096, 1024], &[true, false]),
            ReduceScratch {
                buffer: 33_554_432,
                semaphores: 32
            }
        );
        assert_eq!(
            scratch(&[4096, 4096], &[true, false]),
            ReduceScratch {
                buffer: 134_217_728,
                semaphores: 128
            }
        );
        assert_eq!(
            scratch(&[512, 8, 3072], &[true, true, false]),
            ReduceScratch {
                buffer: 100_663_296,
                semaphores: 96
            }
        );
        // mean of (8, 512, 1024): 2048 B buffer, 4 B semaphore
        assert_eq!(
            scratch(&[8, 512, 1024], &[true, true, true]),
            ReduceScratch {
                buffer: 2048,
                semaphores: 4
            }
        );
    }

    #[test]
    fn small_reductions_need_no_scratch() {
        assert_eq!(scratch(&[10, 100], &[true, true]).buffer, 0);
        assert_eq!(
            scratch(&[8, 512, 16, 64], &[false, false, false, true]).buffer,
            0
        );
    }
}
