//! `torch.autocast("cuda", dtype=...)` as PyTorch 2.11 implements it
//! (`aten/src/ATen/autocast_mode.{h,cpp}`, `torch/amp/autocast_mode.py`).
//!
//! - The region ([`Runtime::autocast`], [`Runtime::autocast_with`]) sets the
//!   thread's autocast state (enabled, dtype, cache enabled), increments the
//!   thread's nesting counter, and on exit to nesting 0 clears the cast
//!   cache (`clear_autocast_cache`): the low-precision copies of the weights
//!   die there unless a node saved them.
//! - Every op that has an `AutocastCUDA` kernel starts with the
//!   [`autocast!`](crate::autocast!) hook, which applies the op's
//!   [`CastPolicy`] ([`cuda_policy`], the lists of `autocast_mode.h`) and
//!   re-runs the op on the cast arguments with autocast excluded (the
//!   `ExcludeDispatchKeyGuard` of `WrapFunction_::call`), so the ops it is
//!   made of do not cast again. Ops without a kernel fall through, and the
//!   ops they are made of autocast themselves.
//! - `cached_cast`: a cast is a real `arg.to(dtype)` (`_to_copy`, with a
//!   `ToCopyBackward0` that saves nothing); casts of fp32 leaves that
//!   require grad to the low-precision dtype (the weights) are cached for
//!   the life of the outermost region, keyed by the source `TensorImpl`.
//! - The casts of one op are evaluated right to left (GCC evaluates the
//!   arguments of `(*F)(cached_cast(args)...)` in reverse; the H100 trace of
//!   `llama_train_autocast_adamw` shows each `q_proj` weight copy allocated
//!   before its input copy) and the uncached ones die, left to right, when
//!   the op returns, unless the op saved them.
//!
//! The autograd thread runs with the state the caller of `backward()` had
//! (`GraphTask::thread_locals_`) and its own nesting counter; the cache is
//! one per process.

use std::collections::HashMap;
use std::rc::{Rc, Weak};

use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::runtime::{Runtime, Thread};
use crate::tensor::{Tensor, TensorImpl};

/// `at::autocast::CastPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastPolicy {
    /// cast every floating CUDA argument to the autocast dtype
    LowerPrecisionFp,
    /// cast every floating CUDA argument to float32
    Fp32,
    /// run in float32 through the op's `dtype` argument, if the caller left
    /// it unset and the first argument is eligible
    Fp32SetOptDtype,
    /// call the overload that takes a `dtype`, with float32 (`norm`)
    Fp32AppendDtype,
    /// cast every floating CUDA argument to the widest of their types
    Promote,
    /// refused under autocast (`binary_cross_entropy`)
    Banned,
}

/// Every ATen op (`name` or `name.overload`) with an `AutocastCUDA` kernel
/// and its policy, as `autocast_mode.cpp` registers them from the lists of
/// `autocast_mode.h` (pytorch/pytorch `d70fe7f`).
pub const CUDA_POLICIES: &[(&str, CastPolicy)] = {
    use CastPolicy::*;
    &[
        // AT_FORALL_LOWER_PRECISION_FP, then cudnn_convolution(_transpose)
        ("_convolution.deprecated", LowerPrecisionFp),
        ("_convolution", LowerPrecisionFp),
        ("conv1d", LowerPrecisionFp),
        ("conv2d", LowerPrecisionFp),
        ("conv3d", LowerPrecisionFp),
        ("conv_tbc", LowerPrecisionFp),
        ("conv_transpose1d", LowerPrecisionFp),
        ("conv_transpose2d.input", LowerPrecisionFp),
        ("conv_transpose3d.input", LowerPrecisionFp),
        ("convolution", LowerPrecisionFp),
        ("prelu", LowerPrecisionFp),
        ("addmm", LowerPrecisionFp),
        ("addmv", LowerPrecisionFp),
        ("addr", LowerPrecisionFp),
        ("matmul", LowerPrecisionFp),
        ("einsum", LowerPrecisionFp),
        ("mm", LowerPrecisionFp),
        ("mv", LowerPrecisionFp),
        ("linalg_vecdot", LowerPrecisionFp),
        ("linear", LowerPrecisionFp),
        ("addbmm", LowerPrecisionFp),
        ("baddbmm", LowerPrecisionFp),
        ("bmm", LowerPrecisionFp),
        ("chain_matmul", LowerPrecisionFp),
        ("linalg_multi_dot", LowerPrecisionFp),
        ("_thnn_fused_lstm_cell", LowerPrecisionFp),
        ("_thnn_fused_gru_cell", LowerPrecisionFp),
        ("lstm_cell", LowerPrecisionFp),
        ("gru_cell", LowerPrecisionFp),
        ("rnn_tanh_cell", LowerPrecisionFp),
        ("rnn_relu_cell", LowerPrecisionFp),
        ("_scaled_dot_product_flash_attention", LowerPrecisionFp),
        ("scaled_dot_product_attention", LowerPrecisionFp),
        ("cudnn_convolution", LowerPrecisionFp),
        ("cudnn_convolution_transpose", LowerPrecisionFp),
        // AT_FORALL_FP32
        ("acos", Fp32),
        ("asin", Fp32),
        ("cosh", Fp32),
        ("erfinv", Fp32),
        ("exp", Fp32),
        ("expm1", Fp32),
        ("log", Fp32),
        ("log10", Fp32),
        ("log2", Fp32),
        ("log1p", Fp32),
        ("reciprocal", Fp32),
        ("rsqrt", Fp32),
        ("sinh", Fp32),
        ("tan", Fp32),
        ("pow.Tensor_Scalar", Fp32),
        ("pow.Tensor_Tensor", Fp32),
        ("pow.Scalar", Fp32),
        ("softplus", Fp32),
        ("layer_norm", Fp32),
        ("native_layer_norm", Fp32),
        ("group_norm", Fp32),
        ("frobenius_norm.dim", Fp32),
        ("nuclear_norm", Fp32),
        ("nuclear_norm.dim", Fp32),
        ("cosine_similarity", Fp32),
        ("poisson_nll_loss", Fp32),
        ("cosine_embedding_loss", Fp32),
        ("nll_loss", Fp32),
        ("nll_loss2d", Fp32),
        ("hinge_embedding_loss", Fp32),
        ("kl_div", Fp32),
        ("l1_loss", Fp32),
        ("smooth_l1_loss", Fp32),
        ("huber_loss", Fp32),
        ("mse_loss", Fp32),
        ("margin_ranking_loss", Fp32),
        ("multilabel_margin_loss", Fp32),
        ("soft_margin_loss", Fp32),
        ("triplet_margin_loss", Fp32),
        ("multi_margin_loss", Fp32),
        ("binary_cross_entropy_with_logits", Fp32),
        ("dist", Fp32),
        ("pdist", Fp32),
        ("cdist", Fp32),
        ("renorm", Fp32),
        ("logsumexp", Fp32),
        ("upsample_nearest1d", Fp32),
        ("_upsample_nearest_exact1d", Fp32),
        ("upsample_nearest2d", Fp32),
        ("_upsample_nearest_exact2d", Fp32),
        ("upsample_nearest3d", Fp32),
        ("_upsample_nearest_exact3d", Fp32),
        ("upsample_linear1d", Fp32),
        ("upsample_bilinear2d", Fp32),
        ("_upsample_bilinear2d_aa", Fp32),
        ("upsample_trilinear3d", Fp32),
        ("upsample_bicubic2d", Fp32),
        ("_upsample_bicubic2d_aa", Fp32),
        // AT_FORALL_FP32_SET_OPT_DTYPE
        ("prod", Fp32SetOptDtype),
        ("prod.dim_int", Fp32SetOptDtype),
        ("prod.dim_Dimname", Fp32SetOptDtype),
        ("softmax.int", Fp32SetOptDtype),
        ("softmax.Dimname", Fp32SetOptDtype),
        ("log_softmax.int", Fp32SetOptDtype),
        ("log_softmax.Dimname", Fp32SetOptDtype),
        ("cumprod", Fp32SetOptDtype),
        ("cumprod.dimname", Fp32SetOptDtype),
        ("cumsum", Fp32SetOptDtype),
        ("cumsum.dimname", Fp32SetOptDtype),
        ("linalg_vector_norm", Fp32SetOptDtype),
        ("linalg_matrix_norm", Fp32SetOptDtype),
        ("linalg_matrix_norm.str_ord", Fp32SetOptDtype),
        ("sum", Fp32SetOptDtype),
        ("sum.dim_IntList", Fp32SetOptDtype),
        ("sum.dim_DimnameList", Fp32SetOptDtype),
        // AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE
        ("norm.Scalar", Fp32AppendDtype),
        ("norm.ScalarOpt_dim", Fp32AppendDtype),
        ("norm.names_ScalarOpt_dim", Fp32AppendDtype),
        // AT_FORALL_PROMOTE (cat and stack promote on AutocastCPU only)
        ("addcdiv", Promote),
        ("addcmul", Promote),
        ("atan2", Promote),
        ("bilinear", Promote),
        ("cross", Promote),
        ("dot", Promote),
        ("vdot", Promote),
        ("grid_sampler", Promote),
        ("index_put", Promote),
        ("tensordot", Promote),
        ("scatter_add", Promote),
        ("binary_cross_entropy", Banned),
    ]
};

/// The `AutocastCUDA` kernel of an ATen op (`name` or `name.overload`):
/// its policy in [`CUDA_POLICIES`], `None` for an op that falls through.
pub fn cuda_policy(op: &str) -> Option<CastPolicy> {
    CUDA_POLICIES
        .iter()
        .find(|(name, _)| *name == op)
        .map(|&(_, policy)| policy)
}

/// What `torch.autocast(device_type="cuda", dtype=, enabled=, cache_enabled=)`
/// sets for its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutocastConfig {
    /// `enabled` (`False` disables autocast inside an enabled region)
    pub enabled: bool,
    /// `dtype` (`None`: the current `torch.get_autocast_dtype("cuda")`)
    pub dtype: Option<DType>,
    /// `cache_enabled` (`None`: the current `torch.is_autocast_cache_enabled()`)
    pub cache_enabled: Option<bool>,
}

impl AutocastConfig {
    /// `torch.autocast("cuda", dtype=dtype)`.
    pub fn enabled(dtype: DType) -> Self {
        AutocastConfig {
            enabled: true,
            dtype: Some(dtype),
            cache_enabled: None,
        }
    }
    /// `torch.autocast("cuda", enabled=False)`.
    pub fn disabled() -> Self {
        AutocastConfig {
            enabled: false,
            dtype: None,
            cache_enabled: None,
        }
    }
}

/// The thread-local autocast state of one thread: whether the `AutocastCUDA`
/// key is enabled (not excluded), `autocast_dtype[CUDA]`, `cache_enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AutocastTls {
    pub(crate) enabled: bool,
    pub(crate) dtype: DType,
    pub(crate) cache_enabled: bool,
}

impl Default for AutocastTls {
    fn default() -> Self {
        // autocast_mode.cpp: `autocast_dtype` of CUDA defaults to kHalf; the
        // cache is enabled by default
        AutocastTls {
            enabled: false,
            dtype: DType::F16,
            cache_enabled: true,
        }
    }
}

/// The process's autocast state: per thread ([`Thread`]) the TLS and the
/// nesting counter, and the one cast cache (`get_cached_casts()`, a static).
#[derive(Default)]
pub(crate) struct AutocastState {
    tls: [AutocastTls; 2],
    nesting: [i32; 2],
    cache: CastCache,
}

/// `get_cached_casts()`: source `TensorImpl*` -> (a weak reference that
/// keeps the address from being reused, the cast). Entries are kept in
/// insertion order, and clearing frees them in that order.
///
/// PyTorch's cache is a `ska::flat_hash_map<TensorImpl*, ...>`
/// (`c10/util/flat_hash_map.h`): `std::hash` of a pointer is the address,
/// the default `fibonacci_hash_policy` puts a key in slot
/// `(11400714819323198485 * address) >> (64 - log2(slots))`, and `clear()`
/// destroys the entries slot by slot (the table never shrinks). So the
/// order follows the CPU heap addresses of the weights' `TensorImpl`s, which
/// change from one process to the next (measured: `docs/accuracy.md`). The
/// twin cannot know those addresses, and need not: the cache's frees come
/// one after the other, and the caching allocator ends in the same state
/// (and the same figures) whatever the order of frees with no allocation
/// between them. Only the order of the trace's entries differs.
#[derive(Default)]
struct CastCache {
    index: HashMap<usize, usize>,
    entries: Vec<(Weak<TensorImpl>, Tensor)>,
}

impl CastCache {
    fn get(&self, key: usize) -> Option<&Tensor> {
        self.index.get(&key).map(|&i| &self.entries[i].1)
    }
    fn insert(&mut self, key: usize, source: Weak<TensorImpl>, cast: Tensor) {
        self.index.insert(key, self.entries.len());
        self.entries.push((source, cast));
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
}

fn tidx(t: Thread) -> usize {
    match t {
        Thread::Main => 0,
        Thread::Autograd => 1,
    }
}

impl Runtime {
    /// Run `f` under `torch.autocast("cuda", dtype=dtype)`.
    pub fn autocast<T>(&self, dtype: DType, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.autocast_with(AutocastConfig::enabled(dtype), f)
    }

    /// Run `f` under `torch.autocast("cuda", ...)` with every argument
    /// (`__enter__`/`__exit__` of `torch/amp/autocast_mode.py`). Regions
    /// nest; leaving the outermost one clears the cast cache.
    pub fn autocast_with<T>(
        &self,
        cfg: AutocastConfig,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if let Some(d) = cfg.dtype {
            // CUDA accepts any dtype `torch.get_autocast_dtype` can hold
            // among these (bfloat16 needs sm_80+, which every profile has)
            if !matches!(d, DType::BF16 | DType::F16 | DType::F32) {
                return Err(EngineError::Mismatch {
                    op: "autocast",
                    detail: format!(
                        "CUDA autocast supports bfloat16, float16 and float32, got {d}"
                    ),
                });
            }
        }
        let prev = {
            let mut st = self.st.borrow_mut();
            let t = tidx(st.thread);
            let prev = st.autocast.tls[t];
            st.autocast.tls[t] = AutocastTls {
                enabled: cfg.enabled,
                dtype: cfg.dtype.unwrap_or(prev.dtype),
                cache_enabled: cfg.cache_enabled.unwrap_or(prev.cache_enabled),
            };
            st.autocast.nesting[t] += 1;
            prev
        };
        let out = f();
        let cleared = {
            let mut st = self.st.borrow_mut();
            let t = tidx(st.thread);
            st.autocast.nesting[t] -= 1;
            let cleared = if st.autocast.nesting[t] == 0 {
                std::mem::take(&mut st.autocast.cache)
            } else {
                CastCache::default()
            };
            st.autocast.tls[t] = prev;
            cleared
        };
        // the cached casts die here, outside the runtime's borrow
        drop(cleared);
        out
    }

    /// `torch.is_autocast_enabled("cuda")` on the current thread.
    pub fn is_autocast_enabled(&self) -> bool {
        let st = self.st.borrow();
        st.autocast.tls[tidx(st.thread)].enabled
    }

    /// `torch.get_autocast_dtype("cuda")` on the current thread.
    pub fn autocast_dtype(&self) -> DType {
        let st = self.st.borrow();
        st.autocast.tls[tidx(st.thread)].dtype
    }

    /// Number of casts in the autocast cache (the low-precision weight
    /// copies the current region keeps).
    pub fn autocast_cached_casts(&self) -> usize {
        self.st.borrow().autocast.cache.len()
    }

    pub(crate) fn autocast_tls(&self) -> AutocastTls {
        let st = self.st.borrow();
        st.autocast.tls[tidx(st.thread)]
    }

    /// Give `thread` the autocast TLS `tls` (the autograd thread takes the
    /// caller's at `backward()`); returns the previous one.
    pub(crate) fn swap_autocast_tls(&self, thread: Thread, tls: AutocastTls) -> AutocastTls {
        std::mem::replace(&mut self.st.borrow_mut().autocast.tls[tidx(thread)], tls)
    }

    fn set_autocast_enabled(&self, enabled: bool) -> bool {
        let mut st = self.st.borrow_mut();
        let t = tidx(st.thread);
        std::mem::replace(&mut st.autocast.tls[t].enabled, enabled)
    }
}

/// `is_eligible(arg, CUDA)`: a defined floating CUDA tensor that is not
/// double.
fn is_eligible(t: &Tensor) -> bool {
    t.device() == Device::Cuda && t.dtype().is_floating() && t.dtype() != DType::F64
}

/// `cached_cast(to_type, arg, CUDA)`.
fn cached_cast(rt: &Runtime, tls: AutocastTls, to: DType, arg: &Tensor) -> Result<Tensor> {
    if !is_eligible(arg) || arg.dtype() == to {
        return Ok(arg.clone());
    }
    // "Do what Apex does, and cache lower_precision_fp casts of fp32 model
    // weights (leaves)."
    let can_try_cache = to == tls.dtype
        && arg.dtype() == DType::F32
        && arg.requires_grad()
        && arg.is_leaf()
        && !arg.is_view()
        && tls.cache_enabled;
    if !can_try_cache {
        return arg.to_dtype(to);
    }
    let key = Rc::as_ptr(&arg.0) as usize;
    if let Some(c) = rt.st.borrow().autocast.cache.get(key) {
        return Ok(c.clone());
    }
    let c = arg.to_dtype(to)?;
    rt.st
        .borrow_mut()
        .autocast
        .cache
        .insert(key, Rc::downgrade(&arg.0), c.clone());
    Ok(c)
}

/// `promote_type(lower_precision_fp, args...)` (`prioritize` over the
/// eligible arguments).
fn promote_type(lower: DType, args: &[Option<&Tensor>]) -> Result<DType> {
    let mut current = lower;
    for t in args.iter().flatten() {
        if !is_eligible(t) {
            continue;
        }
        let next = t.dtype();
        current = if current == DType::F32 || next == DType::F32 {
            DType::F32
        } else if current == lower && next == lower {
            lower
        } else {
            return Err(EngineError::Mismatch {
                op: "autocast",
                detail: format!(
                    "Unexpected floating ScalarType in at::autocast::prioritize ({next} under {lower} autocast)"
                ),
            });
        };
    }
    Ok(current)
}

/// The arguments an autocast kernel passes on: each tensor argument cast
/// (or not) by the op's policy, and the `dtype` argument it sets.
pub(crate) struct Casts {
    args: Vec<Option<Tensor>>,
    dtype: Option<DType>,
}

impl Casts {
    /// Tensor argument `i` (which the caller passed as a tensor).
    pub(crate) fn t(&self, i: usize) -> &Tensor {
        self.args[i]
            .as_ref()
            .expect("autocast: a tensor argument comes back as a tensor")
    }
    /// Optional tensor argument `i`.
    pub(crate) fn opt(&self, i: usize) -> Option<&Tensor> {
        self.args[i].as_ref()
    }
    /// The `dtype` argument after the policy (`set_opt_dtype`).
    pub(crate) fn dtype(&self) -> Option<DType> {
        self.dtype
    }
}

/// One argument of an autocast hook: a tensor or an optional tensor.
pub(crate) trait AutocastArg<'a> {
    fn arg(self) -> Option<&'a Tensor>;
}
impl<'a> AutocastArg<'a> for &'a Tensor {
    fn arg(self) -> Option<&'a Tensor> {
        Some(self)
    }
}
impl<'a> AutocastArg<'a> for Option<&'a Tensor> {
    fn arg(self) -> Option<&'a Tensor> {
        self
    }
}
impl<'a> AutocastArg<'a> for &Option<&'a Tensor> {
    fn arg(self) -> Option<&'a Tensor> {
        *self
    }
}

/// The `AutocastCUDA` dispatch key in front of ATen op `op` with tensor
/// arguments `args` and `dtype` argument `dtype`: `None` when autocast is
/// off on this thread (or excluded: we are inside an autocast kernel), when
/// `op` has no CUDA kernel or no argument is a CUDA tensor; else the result
/// of `f` run on the cast arguments with autocast excluded.
pub(crate) fn hook<R>(
    rt: &Runtime,
    op: &'static str,
    args: &[Option<&Tensor>],
    dtype: Option<DType>,
    f: impl FnOnce(&Casts) -> Result<R>,
) -> Option<Result<R>> {
    let tls = rt.autocast_tls();
    if !tls.enabled {
        return None;
    }
    let policy = cuda_policy(op)?;
    // the AutocastCUDA key is in the dispatch key set only through a CUDA tensor
    if !args.iter().flatten().any(|t| t.device() == Device::Cuda) {
        return None;
    }
    // WrapFunction_::call: ExcludeDispatchKeyGuard first, then the casts
    let prev = rt.set_autocast_enabled(false);
    let r = run_policy(rt, op, policy, tls, args, dtype, f);
    rt.set_autocast_enabled(prev);
    Some(r)
}

fn run_policy<R>(
    rt: &Runtime,
    op: &'static str,
    policy: CastPolicy,
    tls: AutocastTls,
    args: &[Option<&Tensor>],
    dtype: Option<DType>,
    f: impl FnOnce(&Casts) -> Result<R>,
) -> Result<R> {
    let cast_all = |to: DType| -> Result<Vec<Option<Tensor>>> {
        // right to left, as GCC evaluates the call's arguments
        let mut v: Vec<Option<Tensor>> = vec![None; args.len()];
        for (i, a) in args.iter().enumerate().rev() {
            if let Some(t) = a {
                v[i] = Some(cached_cast(rt, tls, to, t)?);
            }
        }
        Ok(v)
    };
    let uncast = || args.iter().map(|a| a.cloned()).collect::<Vec<_>>();
    let casts = match policy {
        CastPolicy::LowerPrecisionFp => Casts {
            args: cast_all(tls.dtype)?,
            dtype,
        },
        CastPolicy::Fp32 => Casts {
            args: cast_all(DType::F32)?,
            dtype,
        },
        CastPolicy::Fp32SetOptDtype => {
            let first = args.first().copied().flatten();
            let eligible = first.is_some_and(is_eligible);
            Casts {
                args: uncast(),
                dtype: if eligible {
                    dtype.or(Some(DType::F32))
                } else {
                    dtype
                },
            }
        }
        CastPolicy::Fp32AppendDtype => {
            let first = args.first().copied().flatten();
            Casts {
                args: uncast(),
                dtype: first.map(|t| {
                    if is_eligible(t) {
                        DType::F32
                    } else {
                        t.dtype()
                    }
                }),
            }
        }
        CastPolicy::Promote => {
            let to = promote_type(tls.dtype, args)?;
            Casts {
                args: cast_all(to)?,
                dtype,
            }
        }
        CastPolicy::Banned => {
            return Err(EngineError::Unsupported {
                what: format!(
                    "torch.nn.functional.{op} and torch.nn.BCELoss are unsafe to autocast \
                     (use binary_cross_entropy_with_logits)"
                ),
            })
        }
    };
    let r = f(&casts);
    // the casts are temporaries of the call: they die (left to right) when it returns
    drop(casts);
    r
}

/// The autocast hook at the top of an op that has an `AutocastCUDA`
/// kernel: `autocast!(rt, "aten_name", [tensor args] => |a| op(a.t(0), ...))`
/// returns from the enclosing function with the result of the op re-run on
/// the cast arguments (`a.t(i)`, `a.opt(i)` for optional ones) when autocast
/// applies, and does nothing otherwise.
#[macro_export]
#[doc(hidden)]
macro_rules! autocast {
    ($rt:expr, $op:literal, [$($arg:expr),* $(,)?] => |$a:ident| $body:expr) => {
        if let Some(r) = $crate::autocast::hook(
            $rt,
            $op,
            &[$($crate::autocast::AutocastArg::arg($arg)),*],
            None,
            |$a: &$crate::autocast::Casts| $body,
        ) {
            return r;
        }
    };
}

// ---- ops whose autocast policy sets their `dtype` argument -------------------

impl Tensor {
    /// `torch.softmax(x, dim, dtype=)` (`ATen/native/SoftMax.cpp`): with a
    /// `dtype`, the input converted first (`input.toType(dtype)`, a copy
    /// that autograd records), except a CUDA float16 input asked for
    /// float32, which `_softmax(..., half_to_float=True)` reads directly.
    /// Under autocast, `dtype` defaults to float32 (`fp32_set_opt_dtype`).
    pub fn softmax_dtype(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        if let Some(r) = hook(self.rt(), "softmax.int", &[Some(self)], dtype, |a| {
            a.t(0).softmax_dtype(dim, a.dtype())
        }) {
            return r;
        }
        self.softmax_converted(dim, dtype, false)
    }

    /// `torch.log_softmax(x, dim, dtype=)`: as [`Tensor::softmax_dtype`].
    pub fn log_softmax_dtype(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        if let Some(r) = hook(self.rt(), "log_softmax.int", &[Some(self)], dtype, |a| {
            a.t(0).log_softmax_dtype(dim, a.dtype())
        }) {
            return r;
        }
        self.softmax_converted(dim, dtype, true)
    }

    fn softmax_converted(&self, dim: i64, dtype: Option<DType>, log: bool) -> Result<Tensor> {
        match dtype {
            Some(DType::F32) if self.device() == Device::Cuda && self.dtype() == DType::F16 => {
                Err(EngineError::Unsupported {
                    what: "softmax of a float16 CUDA tensor with dtype=float32 \
                           (_softmax with half_to_float=True)"
                        .into(),
                })
            }
            Some(d) => {
                let converted = self.to_dtype(d)?;
                converted.softmax_impl(dim, log)
            }
            None => self.softmax_impl(dim, log),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{BackwardOptions, DType, Device, Runtime, Tensor};

    const MB: i64 = 1 << 20;

    fn param(rt: &Runtime, sizes: &[i64]) -> Tensor {
        let t = rt.randn(sizes, DType::F32, Device::Cuda).unwrap();
        t.requires_grad_(true).unwrap();
        t
    }

    #[test]
    fn policies_follow_autocast_mode_h() {
        use super::{cuda_policy, CastPolicy::*};
        assert_eq!(cuda_policy("linear"), Some(LowerPrecisionFp));
        assert_eq!(
            cuda_policy("scaled_dot_product_attention"),
            Some(LowerPrecisionFp)
        );
        assert_eq!(cuda_policy("layer_norm"), Some(Fp32));
        assert_eq!(cuda_policy("pow.Tensor_Scalar"), Some(Fp32));
        assert_eq!(cuda_policy("nll_loss"), Some(Fp32));
        assert_eq!(cuda_policy("softmax.int"), Some(Fp32SetOptDtype));
        assert_eq!(cuda_policy("sum"), Some(Fp32SetOptDtype));
        assert_eq!(cuda_policy("addcmul"), Some(Promote));
        // CUDA has no kernel for these: they fall through
        for op in [
            "cat",
            "stack",
            "cross_entropy_loss",
            "embedding",
            "mean",
            "silu",
            "add",
        ] {
            assert_eq!(cuda_policy(op), None, "{op}");
        }
    }

    /// `F.linear(x, W)` under bf16 autocast, x (8 MiB fp32) requiring grad:
    /// the weight copy (cached, 2 MiB), then the input copy (4 MiB), then the
    /// bf16 output (4 MiB); `MmBackward0` saves both copies, so after the
    /// region they stay, and the cache is empty.
    #[test]
    fn linear_casts_weight_then_input_and_saves_both() {
        let rt = Runtime::default();
        let w = param(&rt, &[1024, 1024]);
        let x0 = param(&rt, &[2, 1024, 1024]);
        let x = &x0 * 2.0;
        let base = rt.memory_allocated();
        rt.record_memory_history(true);
        let y = rt
            .autocast(DType::BF16, || {
                let y = x.linear(&w, None)?;
                assert_eq!(rt.autocast_cached_casts(), 1);
                Ok(y)
            })
            .unwrap();
        assert_eq!(rt.autocast_cached_casts(), 0);
        assert_eq!(y.dtype(), DType::BF16);
        let allocs: Vec<u64> = rt
            .trace()
            .iter()
            .filter(|e| e.action == vramscope_alloc::TraceAction::Alloc)
            .map(|e| e.size)
            .collect();
        let ws = rt.profile().cublas_workspace;
        assert_eq!(
            allocs,
            vec![2 * MB as u64, 4 * MB as u64, 4 * MB as u64, ws]
        );
        // weight copy + input copy (saved) + output
        assert_eq!(rt.memory_allocated() - base, 10 * MB + ws as i64);
        drop(y);
        assert_eq!(
            rt.memory_allocated() - base,
            ws as i64,
            "the graph held the copies"
        );
    }

    /// With an input that does not require grad, the weight copy is not
    /// saved (`mm` saves `mat2` only for `self`'s gradient): it lives in the
    /// cache until the outermost region exits, and dies there.
    #[test]
    fn an_unsaved_weight_copy_dies_at_the_outermost_exit() {
        let rt = Runtime::default();
        let w = param(&rt, &[1024, 1024]);
        let x = rt.randn(&[1024, 1024], DType::F32, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        let ws = rt.profile().cublas_workspace as i64;
        let y = rt
            .autocast(DType::BF16, || {
                let y = rt.autocast(DType::BF16, || {
                    let y = x.linear(&w, None)?;
                    // weight copy (cached) + input copy (saved) + output
                    assert_eq!(rt.memory_allocated() - base, 2 * MB + 2 * MB + 2 * MB + ws);
                    Ok(y)
                })?;
                // inner exit: nesting 1, the cache stays
                assert_eq!(rt.autocast_cached_casts(), 1);
                assert_eq!(rt.memory_allocated() - base, 6 * MB + ws);
                // the second use hits the cache: no new weight copy
                let y2 = x.linear(&w, None)?;
                assert_eq!(rt.memory_allocated() - base, 6 * MB + 4 * MB + ws);
                drop(y2);
                Ok(y)
            })
            .unwrap();
        assert_eq!(rt.autocast_cached_casts(), 0);
        assert_eq!(rt.memory_allocated() - base, 4 * MB + ws);
        drop(y);
        assert_eq!(rt.memory_allocated() - base, ws);
    }

    /// fp32 ops cast low-precision inputs up; ops without a kernel keep
    /// their dtype; an op inside an autocast kernel does not cast again.
    #[test]
    fn fp32_and_fallthrough_ops() {
        let rt = Runtime::default();
        let x = rt.randn(&[MB / 2], DType::BF16, Device::Cuda).unwrap();
        rt.autocast(DType::BF16, || {
            let base = rt.memory_allocated();
            let p = x.pow_scalar(2.0)?;
            assert_eq!(p.dtype(), DType::F32);
            // the fp32 copy of x died with the call (pow saves it only for grad)
            assert_eq!(rt.memory_allocated() - base, 2 * MB);
            assert_eq!(x.silu()?.dtype(), DType::BF16);
            assert_eq!(x.exp()?.dtype(), DType::F32);
            assert_eq!(x.softmax(0)?.dtype(), DType::F32);
            assert_eq!(
                x.log_softmax_dtype(0, Some(DType::BF16))?.dtype(),
                DType::BF16
            );
            let ln = x.layer_norm(&[MB / 2], None, None)?;
            assert_eq!(ln.dtype(), DType::F32);
            Ok(())
        })
        .unwrap();
    }

    /// Disabled regions inside enabled ones (`maybe_autocast(enabled=False)`
    /// around HF's rotary embedding) keep fp32; the nesting counts both.
    #[test]
    fn disabled_region_nests() {
        let rt = Runtime::default();
        let w = param(&rt, &[64, 64]);
        let x = rt.randn(&[64, 64], DType::F32, Device::Cuda).unwrap();
        rt.autocast(DType::F16, || {
            let y = x.mm(&w)?;
            assert_eq!(y.dtype(), DType::F16);
            rt.autocast_with(super::AutocastConfig::disabled(), || {
                assert!(!rt.is_autocast_enabled());
                assert_eq!(x.mm(&w)?.dtype(), DType::F32);
                Ok(())
            })?;
            // still cached: the disabled region was not the outermost
            assert_eq!(rt.autocast_cached_casts(), 1);
            assert!(rt.is_autocast_enabled());
            Ok(())
        })
        .unwrap();
        assert!(!rt.is_autocast_enabled());
        assert!(rt.autocast(DType::I64, || Ok(())).is_err());
    }

    /// Backward runs without autocast; the gradient of the weight comes back
    /// to fp32 through `ToCopyBackward0`, which saves nothing.
    #[test]
    fn backward_returns_fp32_grads() {
        let rt = Runtime::default();
        let w = param(&rt, &[256, 256]);
        let x0 = param(&rt, &[256, 256]);
        let x = &x0 * 1.0;
        let y = rt.autocast(DType::BF16, || x.linear(&w, None)).unwrap();
        let cast_w = y.grad_fn().unwrap().next_functions()[1].clone().unwrap();
        assert_eq!(cast_w.name(), "TBackward0");
        let to_copy = cast_w.next_functions()[0].clone().unwrap();
        assert_eq!(to_copy.name(), "ToCopyBackward0");
        assert_eq!(to_copy.num_saved(), 0);
        let s = y.sum().unwrap();
        s.backward_with(None, BackwardOptions::default()).unwrap();
        assert_eq!(w.grad().unwrap().dtype(), DType::F32);
        assert_eq!(x0.grad().unwrap().dtype(), DType::F32);
    }
}
