//! Routing kernels of a mixture-of-experts layer: `topk`, `sort`, `histc`
//! and the grouped product `_grouped_mm`, each allocating what its ATen CUDA
//! kernel allocates. `topk` and `_grouped_mm` record their autograd nodes
//! (`TopkBackward0`, `GroupedMmBackward0`, as `derivatives.yaml` and
//! `FunctionsManual.cpp` write them); the integer kernels have none.

use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::runtime::Category;
use crate::scratch::ScratchRule;
use crate::tensor::Tensor;

/// `should_use_small_sort` (cuda/Sort.cpp): rows up to this length sort in
/// place in one kernel.
const SMALL_SORT: i64 = 4096;

/// `should_use_multiblock` (cuda/TensorTopK.cu): the slices and their length
/// for which `topk` goes to `mbtopk::launch` (CUB with scan-by-key buffers).
fn multiblock_topk(slices: i64, n: i64) -> bool {
    let least = match slices {
        ..=20 => 20000,
        21..=40 => 10000,
        41..=80 => 8000,
        81..=199 => 5000,
        200..=799 => 3000,
        800..=4000 => 800,
        _ => 400,
    };
    n >= least
}

fn no_autograd(op: &str, t: &Tensor) -> Result<()> {
    if t.rt().is_grad_enabled() && t.requires_grad() {
        return Err(EngineError::Unsupported {
            what: format!("{op} with autograd"),
        });
    }
    Ok(())
}

impl Tensor {
    /// `torch.topk(t, k, dim=-1)` of a contiguous input (cuda/TensorTopK.cu):
    /// `values` then `indices` (int64) allocated by the structured op; one
    /// block a slice allocates nothing more, and `sorted` results of up to
    /// 4096 sort in place. Inputs that take the multi-block kernel are
    /// refused (its buffers are modelled in the Python capture only).
    pub fn topk(&self, k: i64) -> Result<(Tensor, Tensor)> {
        const OP: &str = "topk";
        let rt = self.rt().clone();
        if rt.is_grad_enabled() && self.requires_grad() {
            // `TopkBackward0` saves the indices (and the input's sizes):
            // `value_selecting_reduction_backward_symint` makes
            // `zeros(sizes)` and `scatter_`s the gradient into it
            let indices = std::cell::RefCell::new(None);
            let sizes = self.sizes().to_vec();
            let values = crate::function::apply(
                &rt,
                "TopkBackward0",
                &[self],
                |ctx, x| {
                    let (v, i) = x[0].topk(k)?;
                    ctx.save_for_backward(&[&i]);
                    *indices.borrow_mut() = Some(i);
                    Ok(v)
                },
                move |_saved, grads| {
                    let Some(g) = grads.first().cloned().flatten() else {
                        return Ok(vec![None]);
                    };
                    let zeros = g.rt().empty_op(
                        &sizes,
                        g.dtype(),
                        g.device(),
                        "zeros",
                        Category::Gradient,
                    )?;
                    Ok(vec![Some(zeros)])
                },
            )?;
            let i = indices.into_inner().expect("set by the forward");
            return Ok((values, i));
        }
        let n = if self.dim() == 0 { 1 } else { self.size(-1) };
        if k < 0 || k > n {
            return Err(crate::error::shape_err(
                OP,
                format!("selected index k ({k}) out of range for {n} elements"),
            ));
        }
        let slices = if n == 0 { 0 } else { self.numel() / n };
        if !self.is_contiguous() || multiblock_topk(slices, n) || k > SMALL_SORT {
            return Err(EngineError::Unsupported {
                what: format!(
                    "topk of {k} over {:?} (only single-block, contiguous topk of at most 4096 results is modelled)",
                    self.sizes()
                ),
            });
        }
        let mut sizes = self.sizes().to_vec();
        if let Some(last) = sizes.last_mut() {
            *last = k;
        }
        let values = rt.empty_op(&sizes, self.dtype(), self.device(), OP, Category::Output)?;
        let indices = rt.empty_op(&sizes, DType::I64, self.device(), OP, Category::Output)?;
        Ok((values, indices))
    }

    /// `torch.sort(t)` along the last dim of a contiguous 1-D input
    /// (cuda/Sort.cpp `sort_stable_kernel`): `values` then `indices`
    /// (int64); up to 4096 items sort in place beside an int64 index row;
    /// longer, one segment goes to `cuda::cub::radix_sort_pairs` of the keys
    /// with an int64 `arange` as values, on every key bit. As the Python
    /// capture's `_sort` (measured on the H200, blind9/i06).
    pub fn sort(&self) -> Result<(Tensor, Tensor)> {
        const OP: &str = "sort";
        no_autograd(OP, self)?;
        if self.dim() != 1 || !self.is_contiguous() {
            return Err(EngineError::Unsupported {
                what: format!(
                    "sort of {:?} (only a contiguous 1-D sort is modelled)",
                    self.sizes()
                ),
            });
        }
        let rt = self.rt().clone();
        let n = self.numel();
        let values = rt.empty_op(
            self.sizes(),
            self.dtype(),
            self.device(),
            OP,
            Category::Output,
        )?;
        let indices = rt.empty_op(
            self.sizes(),
            DType::I64,
            self.device(),
            OP,
            Category::Output,
        )?;
        if n == 0 || self.device() != Device::Cuda {
            return Ok((values, indices));
        }
        let row = rt.empty_op(&[n], DType::I64, self.device(), OP, Category::Temporary)?;
        if n > SMALL_SORT {
            let key = self.dtype().size();
            let rule = ScratchRule::RadixSortPairs {
                n,
                key_bytes: key,
                value_bytes: 8,
                end_bit: 8 * key,
            };
            match rule.bytes(&rt.profile()) {
                Some(bytes) => drop(rt.scratch(bytes, rule, OP)?),
                None => rt.note_unmeasured(format!(
                    "CUB's storage for the radix sort of {n} items is not measured for {}: taken as 0 bytes",
                    rt.profile().name
                )),
            }
        }
        drop(row);
        Ok((values, indices))
    }

    /// `torch.histc(t, bins, min, max)` of a 1-D integer input on CUDA
    /// (cuda/SummaryOps.cu): the output `zeros(bins)` in the input's dtype;
    /// `CUDA_tensor_histogram` counts in shared memory below 100 bins, and
    /// from 100 to 999 bins in a `zeros({grid.x, bins})` partial histogram
    /// (`grid.x = ceil(n / 512)`, `getApplyGrid`) that dies with the call.
    pub fn histc(&self, bins: i64) -> Result<Tensor> {
        const OP: &str = "histc";
        no_autograd(OP, self)?;
        if bins <= 0 {
            return Err(crate::error::shape_err(OP, "bins must be > 0"));
        }
        let rt = self.rt().clone();
        let out = rt.empty_op(&[bins], self.dtype(), self.device(), OP, Category::Output)?;
        let n = self.numel();
        if n > 0 && (100..1000).contains(&bins) && self.device() == Device::Cuda {
            let grid = (n + 511) / 512;
            let partial = rt.empty_op(
                &[grid, bins],
                self.dtype(),
                self.device(),
                OP,
                Category::Temporary,
            )?;
            drop(partial);
        } else if bins >= 1000 {
            return Err(EngineError::Unsupported {
                what: format!("histc of {bins} bins (global-memory histogram)"),
            });
        }
        Ok(out)
    }

    /// `t // s` (`floor_divide` by a Python int): a TensorIterator output of
    /// `t`'s dtype.
    pub fn floor_divide_scalar(&self, _s: i64) -> Result<Tensor> {
        no_autograd("floor_divide", self)?;
        crate::ops::iter_output("floor_divide", &[self], self.dtype(), Category::Output)
    }

    /// `t.clamp(min, max)` of an integer tensor: a TensorIterator output of
    /// `t`'s dtype.
    pub fn clamp_scalars(&self) -> Result<Tensor> {
        no_autograd("clamp", self)?;
        crate::ops::iter_output("clamp", &[self], self.dtype(), Category::Output)
    }

    /// `t[idx] = src` (`index_put_`, accumulate false) with one int64 index
    /// on dim 0: the kernel runs in place through TensorIterator, allocating
    /// nothing (one index needs no broadcast copies).
    pub fn index_put_(&self, index: &Tensor, src: &Tensor) -> Result<()> {
        const OP: &str = "index_put_";
        no_autograd(OP, self)?;
        no_autograd(OP, src)?;
        if index.dtype() != DType::I64 || index.dim() != 1 {
            return Err(EngineError::Unsupported {
                what: format!(
                    "index_put_ with a {} index of {:?} (one 1-D int64 index is modelled)",
                    index.dtype(),
                    index.sizes()
                ),
            });
        }
        Ok(())
    }

    /// `torch._grouped_mm(a, b, offs)` of a 2-D `a` `(S, K)` by a 3-D `b`
    /// `(G, K, N)` with int32 offsets `(G,)` (cuda/GroupedBlas.cpp): the
    /// output `(S, N)` (`create_grouped_gemm_output_tensor`, rows padded to
    /// 16 bytes: widths that need it are refused); bf16 on sm 9.x/10.x runs
    /// the CUTLASS kernel, which allocates a byte buffer of the groups'
    /// arguments (60 bytes a group) and a workspace of 512 bytes a
    /// multiprocessor, both freed at once (the Python capture's rule,
    /// measured on the H200); other dtypes run `_grouped_mm_fallback`, an
    /// `mm_out` per group into slices of the output (no allocation).
    pub fn grouped_mm(&self, b: &Tensor, offs: &Tensor) -> Result<Tensor> {
        const OP: &str = "_grouped_mm";
        let rt = self.rt().clone();
        if rt.is_grad_enabled() && (self.requires_grad() || b.requires_grad()) {
            // `GroupedMmBackward0` (derivatives.yaml: `self` only in mat2's
            // formula, `mat2` only in self's) saves self when mat2 needs a
            // gradient, mat2 when self does (`guard_for`'s
            // `should_compute_output`), offs always;
            // `_grouped_mm_mat1_backward`: `_grouped_mm(grad, mat2.transpose(-2, -1), offs)`
            // (self row-major); `_grouped_mm_mat2_backward` for a column-major
            // mat2 (a transposed weight): `_grouped_mm(grad.transpose(-2, -1),
            // self, offs).transpose(-2, -1)`
            let (save_a, save_b) = (b.requires_grad(), self.requires_grad());
            // (the layouts the two formulas below are written for)
            let layouts =
                b.strides()[1] == 1 && b.strides()[2] == b.size(1) && self.strides()[0] != 1;
            return crate::function::apply(
                &rt,
                "GroupedMmBackward0",
                &[self, b, offs],
                |ctx, x| {
                    // in the generated node's `release_variables()` order
                    // (torch/csrc/autograd/generated/Functions.h): mat2_,
                    // offs_, self_
                    let kept: Vec<&Tensor> = [(save_b, x[1]), (true, x[2]), (save_a, x[0])]
                        .into_iter()
                        .filter_map(|(keep, t)| keep.then_some(t))
                        .collect();
                    ctx.save_for_backward(&kept);
                    x[0].grouped_mm(x[1], x[2])
                },
                move |saved, grads| {
                    let Some(g) = grads.first().cloned().flatten() else {
                        return Ok(vec![None, None, None]);
                    };
                    let mut it = saved.iter();
                    let b = if save_b { it.next() } else { None };
                    let offs = it.next().expect("offs is always saved");
                    let a = if save_a { it.next() } else { None };
                    let unsupported = || EngineError::Unsupported {
                        what: "_grouped_mm backward of a row-major mat2 or a column-major self"
                            .into(),
                    };
                    // the generated node computes its inputs' gradients in
                    // sorted name order: mat2, then self
                    if !layouts {
                        return Err(unsupported());
                    }
                    let grad_b = match a {
                        Some(a) => {
                            let gt = g.transpose(-2, -1);
                            let gb = gt.grouped_mm_2d(a, offs)?.transpose(-2, -1);
                            drop(gt);
                            Some(gb)
                        }
                        None => None,
                    };
                    let grad_a = match b {
                        Some(b) => Some(g.grouped_mm(&b.transpose(-2, -1), offs)?),
                        None => None,
                    };
                    Ok(vec![grad_a, grad_b, None])
                },
            );
        }
        if self.dim() != 2 || b.dim() != 3 || offs.dim() != 1 || offs.size(0) != b.size(0) {
            return Err(crate::error::shape_err(
                OP,
                format!(
                    "expected (S, K) x (G, K, N) with (G,) offsets, got {:?} x {:?} with {:?}",
                    self.sizes(),
                    b.sizes(),
                    offs.sizes()
                ),
            ));
        }
        if self.size(1) != b.size(1) {
            return Err(crate::error::shape_err(
                OP,
                "contraction dimension of mat_a and mat_b must match",
            ));
        }
        grouped_mm_out(self, b.size(0), &[self.size(0), b.size(2)])
    }

    /// `torch._grouped_mm(a, b, offs)` of a 2-D `a` `(M, S)` by a 2-D `b`
    /// `(S, N)`, the groups splitting `S` (a weight gradient): the output
    /// `(G, M, N)`, with [`Tensor::grouped_mm`]'s kernel rules.
    pub fn grouped_mm_2d(&self, b: &Tensor, offs: &Tensor) -> Result<Tensor> {
        const OP: &str = "_grouped_mm";
        no_autograd(OP, self)?;
        no_autograd(OP, b)?;
        if self.dim() != 2 || b.dim() != 2 || offs.dim() != 1 || self.size(1) != b.size(0) {
            return Err(crate::error::shape_err(
                OP,
                format!(
                    "expected (M, S) x (S, N) with offsets, got {:?} x {:?}",
                    self.sizes(),
                    b.sizes()
                ),
            ));
        }
        grouped_mm_out(self, offs.size(0), &[offs.size(0), self.size(0), b.size(1)])
    }
}

/// The output and kernel allocations of `_grouped_mm_cuda`.
fn grouped_mm_out(a: &Tensor, groups: i64, out_sizes: &[i64]) -> Result<Tensor> {
    const OP: &str = "_grouped_mm";
    let dtype = a.dtype();
    if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
        return Err(EngineError::Unsupported {
            what: format!("_grouped_mm of {dtype} (bf16, fp16 and fp32 are accepted)"),
        });
    }
    let last = *out_sizes.last().unwrap_or(&1);
    let align = 16 / dtype.size() as i64;
    if last % align != 0 {
        return Err(EngineError::Unsupported {
            what: format!(
                "_grouped_mm output rows of {last} {dtype} elements (padded to 16 bytes by \
                 create_grouped_gemm_output_tensor; only widths that need no padding are modelled)"
            ),
        });
    }
    let rt = a.rt().clone();
    let out = rt.empty_op(out_sizes, dtype, a.device(), OP, Category::Output)?;
    if a.device() != Device::Cuda {
        return Ok(out);
    }
    let (major, _) = rt.profile().capability;
    // `_scaled_mm_allowed_device(sm90_only=true, sm100_only=true)` and all bf16
    if dtype == DType::BF16 && (major == 9 || major == 10) {
        let arguments = rt.empty_op(
            &[60 * groups],
            DType::U8,
            a.device(),
            OP,
            Category::Workspace,
        )?;
        let sms = i64::from(rt.profile().sm_count);
        let workspace =
            rt.empty_op(&[512 * sms], DType::U8, a.device(), OP, Category::Workspace)?;
        drop(workspace);
        drop(arguments);
    } else {
        // `_grouped_mm_fallback`: `at::mm_out` per group, through cuBLAS
        rt.cublas_handle(OP, dtype)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Runtime};

    /// `topk` of a (tokens, experts) router output: values and int64
    /// indices, nothing else; the multi-block sizes are refused.
    #[test]
    fn topk_allocates_its_two_outputs() {
        let rt = Runtime::default();
        let p = rt.empty(&[1000, 8], DType::F32, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let (v, i) = p.topk(2).unwrap();
        assert_eq!((v.sizes(), i.dtype()), (&[1000, 2][..], DType::I64));
        // 8,000 and 16,000 bytes, each rounded up to 512
        assert_eq!(rt.max_memory_allocated() - base, 8192 + 16384);
        let wide = rt.empty(&[5000, 512], DType::F32, Device::Cuda).unwrap();
        assert!(wide.topk(8).is_err());
    }

    /// `sort` of n int64 keys: the two outputs, an int64 row beside them, and
    /// past 4,096 items CUB's radix-sort storage while the row is live.
    #[test]
    fn sort_allocates_outputs_a_row_and_cub_storage_past_4096() {
        let rt = Runtime::new(crate::RuntimeConfig {
            profile: crate::DeviceProfile::h200_torch_2_11(),
            ..Default::default()
        });
        for (n, cub) in [(4096_i64, false), (16384, true)] {
            let ids = rt.empty(&[n], DType::I64, Device::Cuda).unwrap();
            let base = rt.memory_allocated();
            rt.reset_peak_memory_stats();
            let (_v, _p) = ids.sort().unwrap();
            let out = 2 * n * 8;
            assert_eq!(rt.memory_allocated() - base, out);
            let peak = rt.max_memory_allocated() - base;
            assert_eq!(peak > out + n * 8, cub, "{n} items: peak {peak}");
        }
    }

    /// `histc` of 128 bins keeps a `(ceil(n / 512), 128)` partial histogram
    /// for the call; under 100 bins nothing but the output.
    #[test]
    fn histc_partial_histogram_from_100_bins() {
        let rt = Runtime::default();
        let x = rt.empty(&[8192], DType::I32, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let h = x.histc(128).unwrap();
        assert_eq!(h.sizes(), &[128]);
        assert_eq!(rt.memory_allocated() - base, 512);
        assert_eq!(rt.max_memory_allocated() - base, 512 + 16 * 128 * 4);
        drop(h);
        rt.reset_peak_memory_stats();
        let base = rt.memory_allocated();
        let _h = x.histc(8).unwrap();
        assert_eq!(rt.max_memory_allocated() - base, 512);
    }

    /// `_grouped_mm` on the H200: bf16 allocates the groups' arguments and
    /// the CUTLASS workspace (132 SMs x 512 bytes) after the output; fp32
    /// runs the per-group fallback (no more than the output once cuBLAS is
    /// set up); unpadded widths only.
    #[test]
    fn grouped_mm_output_and_cutlass_buffers() {
        let rt = Runtime::new(crate::RuntimeConfig {
            profile: crate::DeviceProfile::h200_torch_2_11(),
            ..Default::default()
        });
        let offs = rt.empty(&[8], DType::I32, Device::Cuda).unwrap();
        let a = rt.empty(&[256, 64], DType::BF16, Device::Cuda).unwrap();
        let w = rt.empty(&[8, 128, 64], DType::BF16, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let out = a.grouped_mm(&w.transpose(-2, -1), &offs).unwrap();
        assert_eq!(out.sizes(), &[256, 128]);
        assert_eq!(rt.memory_allocated() - base, 256 * 128 * 2);
        assert_eq!(
            rt.max_memory_allocated() - base,
            256 * 128 * 2 + 512 + 132 * 512
        );
        let odd = rt.empty(&[8, 60, 64], DType::BF16, Device::Cuda).unwrap();
        assert!(a.grouped_mm(&odd.transpose(-2, -1), &offs).is_err());
    }

    /// `GroupedMmBackward0::release_variables()` frees `offs_` before
    /// `self_` (the generated order: mat2_, offs_, self_), as the H200's
    /// trace of `ddp_mixtral_bf16` frees a layer's expert offsets before its
    /// gathered hidden states.
    #[test]
    fn grouped_mm_node_releases_offs_before_self() {
        let rt = Runtime::new(crate::RuntimeConfig {
            profile: crate::DeviceProfile::h200_torch_2_11(),
            ..Default::default()
        });
        rt.record_memory_history(true);
        let p = rt.empty(&[96, 64], DType::BF16, Device::Cuda).unwrap();
        p.requires_grad_(true).unwrap();
        let w = rt.empty(&[2, 32, 64], DType::BF16, Device::Cuda).unwrap();
        w.requires_grad_(true).unwrap();
        // a non-leaf self and an offsets tensor only the node holds
        let x = p.mul(&p).unwrap();
        let offs = rt.empty(&[2], DType::I32, Device::Cuda).unwrap();
        let (x_at, offs_at) = (x.data_ptr().unwrap(), offs.data_ptr().unwrap());
        let y = x.grouped_mm(&w.transpose(-2, -1), &offs).unwrap();
        drop((x, offs));
        let s = y.sum().unwrap();
        drop(y);
        let from = rt.trace_len();
        s.backward().unwrap();
        let freed = crate::ops::freed_since(&rt, from);
        let at = |a: u64| freed.iter().position(|&f| f == a).unwrap();
        assert!(at(offs_at) < at(x_at), "offs must be freed before self");
    }
}
