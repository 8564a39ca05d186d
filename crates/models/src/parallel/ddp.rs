//! `DistributedDataParallel` as one rank runs it (PyTorch 2.11:
//! `torch/nn/parallel/distributed.py`, `torch/csrc/distributed/c10d/`
//! `reducer.cpp` and `comm.cpp`), every allocation on the current stream.
//!
//! - construction: `_verify_param_shape_across_processes` (an all-gather of
//!   the parameter count and a broadcast of every shape, as int64s on the
//!   GPU), `_sync_module_states` (`broadcast_coalesced` of the parameters
//!   and buffers: flattened by dtype in buckets of at least 250 MiB, two in
//!   flight), then the `Reducer` with ONE bucket per dtype whatever
//!   `bucket_cap_mb` (`_ddp_init_helper`: `[sys.maxsize]` without
//!   `find_unused_parameters`): the bucket's `gradients` buffer holds every
//!   parameter's bytes;
//! - backward: a post hook on each parameter's `AccumulateGrad`
//!   (`autograd_hook` → `mark_variable_ready_dense`) divides the gradient
//!   into its bucket view (`mul_out`, no allocation); under
//!   `gradient_as_bucket_view` the `.grad` becomes that view and the
//!   gradient it replaced is freed; a full bucket is all-reduced in place;
//!   the first iteration records the order the gradients became ready;
//! - the next forward (`_pre_forward` → `_rebuild_buckets`): the new bucket
//!   assignment in that order (`compute_bucket_assignment_by_size`, the
//!   first bucket capped at 1 MiB when `bucket_cap_mb` is DDP's default,
//!   else every bucket at `bucket_cap_mb`), its indices broadcast
//!   (`sync_bucket_indices`: two int32 temporaries), the old buckets
//!   cleared, then the new ones allocated (`initialize_buckets`); every
//!   forward broadcasts the buffers (`_sync_buffers`) while
//!   `require_forward_param_sync` holds: set by a forward with grad enabled
//!   outside `no_sync()`, cleared by any other (a `no_sync()` micro-batch,
//!   an inference pass), and true at construction;
//! - `no_sync()` (gradient accumulation): a forward under it does not
//!   `prepare_for_backward`, so the reducer's hooks return at once
//!   (`expect_autograd_hooks_` false): the gradients accumulate in `.grad`
//!   and neither the rebuild order nor the buckets see them;
//! - `find_unused_parameters=True`: the first buckets are cut at the caps
//!   (`_ddp_init_helper`'s `bucket_size_limits`) and never rebuilt
//!   (`should_rebuild_buckets` is false), the reducer holds
//!   `local_used_map_dev_` (an int32 per parameter, `initialize_local_used_map`;
//!   its host copies are pinned, outside the device's pools), and
//!   `_post_forward` passes the outputs through `_DDPSink`, which clones
//!   each that has a `grad_fn` ([`sink`]);
//! - a mixture of experts (mixtral, qwen3_moe in transformers 5.17) holds
//!   its experts as two 3-D parameters whose `_grouped_mm` backward gives
//!   the whole parameter a gradient whatever the routing, so no parameter
//!   goes unused and the reducer's "expected to have finished reduction"
//!   check cannot fire without `find_unused_parameters`;
//! - frozen parameters (a LoRA base): only those that require grad are the
//!   reducer's (`_build_params_for_reducer`), but `_sync_module_states`
//!   broadcasts every parameter.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use vramscope_engine::{Category, DType, Device, Runtime, Tensor};

use super::nccl;
use crate::error::{ModelError, Result};

/// `DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=...,
/// gradient_as_bucket_view=...)` over `world` ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct DdpConfig {
    /// ranks, at least 2
    pub world: i64,
    /// `bucket_cap_mb` (`None`: DDP's default, 25 with a 1 MiB first bucket)
    pub bucket_cap_mb: Option<f64>,
    /// `gradient_as_bucket_view`
    pub gradient_as_bucket_view: bool,
    /// the first iteration's buckets kept to the end instead of freed at
    /// the rebuild: ProcessGroupNCCL's shelf freeing them late
    /// (pytorch/pytorch#150079) for as long as it can, the upper bound. A
    /// finished all-reduce's tensors go at the main thread's next
    /// collective once the watchdog, scanning every 100 ms, has seen it
    /// done (`ProcessGroupNCCL.cpp`: `Watchdog::runLoop`,
    /// `shelvesToUnstash_`); the reducer waits on the future, not the work.
    pub first_buckets_held: bool,
    /// `find_unused_parameters=True`
    pub find_unused_parameters: bool,
}

impl DdpConfig {
    /// `bucket_bytes_cap` and the rebuilt first bucket's cap
    /// (`first_bucket_bytes_cap`: `dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB,
    /// only when `bucket_cap_mb` is left at its default).
    fn caps(&self) -> (u64, u64) {
        match self.bucket_cap_mb {
            None => (25 << 20, 1 << 20),
            Some(mb) => {
                let b = (mb * 1024.0 * 1024.0) as u64;
                (b, b)
            }
        }
    }
}

/// `DistributedDataParallel.broadcast_bucket_size`.
const BROADCAST_BUCKET_BYTES: u64 = 250 << 20;
/// `broadcast_coalesced`'s `max_in_flight`.
const MAX_IN_FLIGHT: usize = 2;

/// `compute_bucket_assignment_by_size` (reducer.cpp): tensors of `(bytes,
/// dtype)` taken in `order`, each appended to its dtype's open bucket,
/// which closes once it holds at least its limit (the limits advance per
/// dtype, the last repeating); the open ones follow. Without an order the
/// buckets are sorted by their smallest index.
pub fn bucket_assignment(
    tensors: &[(u64, DType)],
    limits: &[u64],
    order: Option<&[usize]>,
) -> Vec<Vec<usize>> {
    let natural: Vec<usize> = (0..tensors.len()).collect();
    let sort = order.is_none();
    let order = order.unwrap_or(&natural);
    // per dtype: (its open bucket, its size, its limit's index), first seen first
    let mut open: Vec<(DType, Vec<usize>, u64, usize)> = Vec::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for &i in order {
        let (bytes, dtype) = tensors[i];
        let k = match open.iter().position(|o| o.0 == dtype) {
            Some(k) => k,
            None => {
                open.push((dtype, Vec::new(), 0, 0));
                open.len() - 1
            }
        };
        let o = &mut open[k];
        o.1.push(i);
        o.2 += bytes;
        if o.2 >= limits[o.3] {
            out.push(std::mem::take(&mut o.1));
            o.2 = 0;
            o.3 = (o.3 + 1).min(limits.len() - 1);
        }
    }
    out.extend(open.into_iter().map(|o| o.1).filter(|b| !b.is_empty()));
    if sort {
        out.sort_by_key(|b| b.iter().copied().min());
    }
    out
}

/// `broadcast_coalesced` (comm.cpp) of `tensors` in buckets of
/// `BROADCAST_BUCKET_BYTES`: each bucket flattened (`flatten_dense_tensors`:
/// a `cat`, none for a lone tensor), at most two in flight, each freed when
/// its broadcast finishes.
fn broadcast_coalesced(rt: &Runtime, tensors: &[Tensor]) -> Result<()> {
    let sizes: Vec<(u64, DType)> = tensors
        .iter()
        .map(|t| (t.numel() as u64 * t.dtype().size(), t.dtype()))
        .collect();
    let mut in_flight: VecDeque<Option<Tensor>> = VecDeque::new();
    for b in bucket_assignment(&sizes, &[BROADCAST_BUCKET_BYTES], None) {
        if in_flight.len() >= MAX_IN_FLIGHT {
            drop(in_flight.pop_front());
        }
        let flat = if b.len() == 1 {
            None
        } else {
            let numel: i64 = b.iter().map(|&i| tensors[i].numel()).sum();
            let dtype = tensors[b[0]].dtype();
            Some(rt.with_category(Category::Communication, || {
                rt.empty(&[numel], dtype, Device::Cuda)
            })?)
        };
        in_flight.push_back(flat);
    }
    while let Some(f) = in_flight.pop_front() {
        drop(f);
    }
    Ok(())
}

/// One `Bucket` of the reducer.
struct Bucket {
    /// `bucket.gradients`: the flat buffer its parameters' gradients are
    /// reduced in
    gradients: Tensor,
    /// its parameters (indices into `Ddp::params`)
    vars: Vec<usize>,
    /// how many are ready in this backward
    ready: usize,
}

/// The DDP state of one rank: the reducer.
pub struct Ddp {
    rt: Runtime,
    cfg: DdpConfig,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
    buckets: Vec<Bucket>,
    /// the first buckets under [`DdpConfig::first_buckets_held`]
    shelf: Vec<Bucket>,
    /// each parameter's bucket and element offset in it (`variable_locators_`)
    locators: Vec<(usize, i64)>,
    /// `rebuilt_param_indices_`: the order the first backward's gradients
    /// became ready
    rebuilt: Vec<usize>,
    has_rebuilt: bool,
    /// NCCL's first-backward share taken
    nccl_backward: bool,
    /// `require_forward_param_sync`: the next forward broadcasts the buffers
    require_forward_param_sync: bool,
    /// `expect_autograd_hooks_`: the last forward prepared for a backward
    expect_autograd_hooks: bool,
    /// `local_used_map_dev_` (with `find_unused_parameters`)
    local_used_map_dev: Option<Tensor>,
    me: Weak<RefCell<Ddp>>,
}

impl Ddp {
    /// `DistributedDataParallel(model, ...)` over the model's `params`
    /// (registration order, on the device; the reducer takes those that
    /// require grad) and `buffers`.
    pub fn wrap(
        rt: &Runtime,
        cfg: &DdpConfig,
        params: Vec<Tensor>,
        buffers: Vec<Tensor>,
    ) -> Result<Rc<RefCell<Ddp>>> {
        if cfg.world < 2 {
            return Err(ModelError::Unsupported(format!(
                "DDP over {} ranks (at least 2)",
                cfg.world
            )));
        }
        if let Some(mb) = cfg.bucket_cap_mb {
            if !(mb.is_finite() && mb > 0.0) {
                return Err(ModelError::Unsupported(format!(
                    "DDP bucket_cap_mb {mb} (expected a positive number of MiB)"
                )));
            }
        }
        if params.is_empty() {
            return Err(ModelError::Unsupported(
                "DDP of a model without parameters".into(),
            ));
        }
        nccl::init_process_group(rt, cfg.world)?;
        // `_module_parameters` then `_build_params_for_reducer`
        let mut states = params;
        let params: Vec<Tensor> = states
            .iter()
            .filter(|p| p.requires_grad())
            .cloned()
            .collect();
        if params.is_empty() {
            return Err(ModelError::Unsupported(
                "DDP of a model without a parameter that requires grad (PyTorch raises: \
                 DistributedDataParallel is not needed)"
                    .into(),
            ));
        }
        rt.with_category(Category::Communication, || verify_params(rt, cfg, &params))?;
        nccl::ddp_construction(rt)?;
        // `_sync_module_states`: every parameter, then the buffers
        states.extend(buffers.iter().cloned());
        broadcast_coalesced(rt, &states)?;
        drop(states);
        let me = Rc::new(RefCell::new(Ddp {
            rt: rt.clone(),
            cfg: cfg.clone(),
            params,
            buffers,
            buckets: Vec::new(),
            shelf: Vec::new(),
            locators: Vec::new(),
            rebuilt: Vec::new(),
            has_rebuilt: false,
            nccl_backward: false,
            require_forward_param_sync: true,
            expect_autograd_hooks: false,
            local_used_map_dev: None,
            me: Weak::new(),
        }));
        {
            let mut d = me.borrow_mut();
            d.me = Rc::downgrade(&me);
            // `_ddp_init_helper`: one bucket per dtype (at the caps when
            // finding unused parameters), the buckets reversed
            let sizes = d.sizes();
            let limits = if cfg.find_unused_parameters {
                let (cap, first) = cfg.caps();
                if cfg.bucket_cap_mb.is_none() {
                    vec![first, cap]
                } else {
                    vec![cap]
                }
            } else {
                vec![u64::MAX]
            };
            let mut first = bucket_assignment(&sizes, &limits, None);
            first.reverse();
            d.initialize_buckets(first)?;
            if cfg.find_unused_parameters {
                // the Reducer's constructor: `initialize_local_used_map`
                let n = d.params.len() as i64;
                d.local_used_map_dev = Some(rt.with_category(Category::Communication, || {
                    rt.empty(&[n], DType::I32, Device::Cuda)
                })?);
            }
            for i in 0..d.params.len() {
                let w = d.me.clone();
                d.params[i].register_post_accumulate_grad_hook(Rc::new(move || {
                    match w.upgrade() {
                        Some(m) => m.borrow_mut().autograd_hook(i),
                        None => Ok(()),
                    }
                }));
            }
        }
        Ok(me)
    }

    fn sizes(&self) -> Vec<(u64, DType)> {
        self.params
            .iter()
            .map(|p| (p.numel() as u64 * p.dtype().size(), p.dtype()))
            .collect()
    }

    /// `initialize_buckets`: the old buckets cleared, then each new one's
    /// flat `gradients` allocated in order (a `.grad` that exists becomes
    /// its view under `gradient_as_bucket_view`).
    fn initialize_buckets(&mut self, assignment: Vec<Vec<usize>>) -> Result<()> {
        let old = std::mem::take(&mut self.buckets);
        if self.cfg.first_buckets_held {
            self.shelf.extend(old);
        } else {
            drop(old);
        }
        self.locators = vec![(0, 0); self.params.len()];
        for (b, vars) in assignment.into_iter().enumerate() {
            let numel: i64 = vars.iter().map(|&i| self.params[i].numel()).sum();
            let dtype = self.params[vars[0]].dtype();
            let rt = &self.rt;
            let gradients = rt.with_category(Category::Communication, || {
                rt.empty(&[numel], dtype, Device::Cuda)
            })?;
            let mut off = 0;
            for &i in &vars {
                self.locators[i] = (b, off);
                off += self.params[i].numel();
            }
            self.buckets.push(Bucket {
                gradients,
                vars,
                ready: 0,
            });
            if self.cfg.gradient_as_bucket_view {
                for i in self.buckets[b].vars.clone() {
                    if self.params[i].grad().is_some() {
                        let v = self.bucket_view(i)?;
                        self.params[i].set_grad(Some(v));
                    }
                }
            }
        }
        Ok(())
    }

    fn bucket_view(&self, i: usize) -> Result<Tensor> {
        let (b, off) = self.locators[i];
        let p = &self.params[i];
        Ok(self.buckets[b]
            .gradients
            .narrow(0, off, p.numel())
            .view(p.sizes())?)
    }

    /// `Reducer::autograd_hook` → `mark_variable_ready`.
    fn autograd_hook(&mut self, i: usize) -> vramscope_engine::Result<()> {
        if !self.nccl_backward {
            // by the end of the first backward, all-reduce or not
            self.nccl_backward = true;
            nccl::first_backward(&self.rt).map_err(to_engine)?;
        }
        if !self.expect_autograd_hooks {
            // a backward the forward did not prepare (`no_sync()`)
            return Ok(());
        }
        if self.should_rebuild_buckets() {
            self.rebuilt.push(i);
        }
        if self.cfg.gradient_as_bucket_view && self.params[i].grad().is_some() {
            // `grad = bucket_view`: the gradient it held is freed
            let v = self.bucket_view(i).map_err(to_engine)?;
            self.params[i].set_grad(Some(v));
        }
        let (b, _) = self.locators[i];
        let bucket = &mut self.buckets[b];
        bucket.ready += 1;
        if bucket.ready == bucket.vars.len() {
            bucket.ready = 0;
            // the bucket's all-reduce, in place
        }
        Ok(())
    }

    /// `DistributedDataParallel.forward` around the module's forward, with
    /// `require_backward_grad_sync` false inside `no_sync()`: with grad
    /// enabled the buckets rebuilt once after the first synced backward;
    /// the buffers broadcast while `require_forward_param_sync`; then what
    /// the forward's end sets (`prepare_for_backward` when grad is enabled
    /// and the gradients sync; nothing the module's forward reads).
    pub fn forward(&mut self, require_backward_grad_sync: bool) -> Result<()> {
        self.pre_forward()?;
        let prepare = self.rt.is_grad_enabled() && require_backward_grad_sync;
        self.require_forward_param_sync = prepare;
        self.expect_autograd_hooks = prepare;
        Ok(())
    }

    /// `should_rebuild_buckets`: once, and never when finding unused
    /// parameters (`static_graph` is not modelled).
    fn should_rebuild_buckets(&self) -> bool {
        !self.cfg.find_unused_parameters && !self.has_rebuilt
    }

    /// Whether `_post_forward` passes the outputs through `_DDPSink`.
    pub fn sinks_outputs(&self) -> bool {
        self.cfg.find_unused_parameters
    }

    fn pre_forward(&mut self) -> Result<()> {
        let rt = self.rt.clone();
        if rt.is_grad_enabled() && self.should_rebuild_buckets() && !self.rebuilt.is_empty() {
            let (cap, first) = self.cfg.caps();
            let sizes = self.sizes();
            let order = std::mem::take(&mut self.rebuilt);
            let assignment = bucket_assignment(&sizes, &[first, cap], Some(&order));
            // sync_bucket_indices: the indices and the bucket sizes as int32s
            rt.with_category(Category::Communication, || -> Result<()> {
                let indices = rt.empty(&[order.len() as i64 + 1], DType::I32, Device::Cuda)?;
                let counts = rt.empty(&[assignment.len() as i64], DType::I32, Device::Cuda)?;
                drop(counts);
                drop(indices);
                Ok(())
            })?;
            self.has_rebuilt = true;
            self.initialize_buckets(assignment)?;
        }
        if self.require_forward_param_sync && !self.buffers.is_empty() {
            broadcast_coalesced(&rt, &self.buffers)?;
        }
        Ok(())
    }
}

/// `_DDPSink.apply(weakref.ref(self), *output_tensor_list)` over the
/// flattened outputs (a `ModelOutput` flattens to its fields in order): each
/// output with a `grad_fn` cloned (`_ddp_sink_clone` is true), its gradient
/// passed through; the others (`None`, no `grad_fn`) kept as they are.
pub fn sink(rt: &Runtime, outputs: Vec<Option<Tensor>>) -> Result<Vec<Option<Tensor>>> {
    let mut out = Vec::with_capacity(outputs.len());
    for o in &outputs {
        out.push(match o {
            Some(t) if t.grad_fn_name().is_some() => Some(vramscope_engine::function::apply(
                rt,
                "_DDPSinkBackward",
                &[t],
                |_, xs| xs[0].clone_tensor(),
                |_, grads| Ok(grads.to_vec()),
            )?),
            other => other.clone(),
        });
    }
    // the original output object dies when `DistributedDataParallel.forward`
    // returns, its fields in order
    for o in outputs {
        drop(o);
    }
    Ok(out)
}

/// `_verify_param_shape_across_processes` (`verify_params_across_processes`):
/// the parameter count (int64) all-gathered into one tensor per rank
/// through a flat output, then two int64s per dimension of every parameter
/// broadcast; freed in reverse order of their declaration.
fn verify_params(rt: &Runtime, cfg: &DdpConfig, params: &[Tensor]) -> Result<()> {
    let count = rt.empty(&[1], DType::I64, Device::Cuda)?;
    let outputs: Vec<Tensor> = (0..cfg.world)
        .map(|_| rt.empty(&[1], DType::I64, Device::Cuda))
        .collect::<vramscope_engine::Result<_>>()?;
    drop(rt.empty(&[cfg.world], DType::I64, Device::Cuda)?);
    let dims: i64 = params.iter().map(|p| p.sizes().len() as i64).sum();
    drop(rt.empty(&[2 * dims], DType::I64, Device::Cuda)?);
    drop(outputs);
    drop(count);
    Ok(())
}

fn to_engine(e: ModelError) -> vramscope_engine::EngineError {
    match e {
        ModelError::Engine(e) => e,
        other => vramscope_engine::EngineError::Unsupported {
            what: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_close_once_they_reach_their_limit() {
        let f = |b: u64| (b, DType::F32);
        // the first bucket's 1 MiB, then 4 MiB
        let t = [f(2 << 20), f(1 << 20), f(3 << 20), f(1 << 20)];
        let b = bucket_assignment(&t, &[1 << 20, 4 << 20], Some(&[3, 2, 1, 0]));
        assert_eq!(b, vec![vec![3], vec![2, 1], vec![0]]);
        // no order: sorted by the smallest index
        let b = bucket_assignment(&t, &[u64::MAX], None);
        assert_eq!(b, vec![vec![0, 1, 2, 3]]);
    }

    fn wrapped() -> (Runtime, Rc<RefCell<Ddp>>) {
        wrapped_with(false)
    }

    fn wrapped_with(find_unused_parameters: bool) -> (Runtime, Rc<RefCell<Ddp>>) {
        let rt = Runtime::default();
        let params = (0..2)
            .map(|_| {
                let p = rt.empty(&[512, 512], DType::F32, Device::Cuda).unwrap();
                p.requires_grad_(true).unwrap();
                p
            })
            .collect();
        let buffers = vec![
            rt.empty(&[32], DType::F32, Device::Cuda).unwrap(),
            rt.empty(&[32], DType::F32, Device::Cuda).unwrap(),
        ];
        let cfg = DdpConfig {
            world: 2,
            bucket_cap_mb: None,
            gradient_as_bucket_view: false,
            first_buckets_held: false,
            find_unused_parameters,
        };
        let d = Ddp::wrap(&rt, &cfg, params, buffers).unwrap();
        (rt, d)
    }

    use crate::families::common::tests::alloc_sizes as allocs;

    #[test]
    fn no_sync_backwards_neither_order_nor_reduce_and_buffers_sync_after_a_synced_forward() {
        let (rt, d) = wrapped();
        // require_forward_param_sync starts true: the first forward
        // broadcasts the two buffers through one flat copy (64 floats)
        let first = allocs(&rt, || d.borrow_mut().forward(false).unwrap());
        assert_eq!(first, vec![256]);
        // under no_sync the hooks return at once
        d.borrow_mut().autograd_hook(1).unwrap();
        d.borrow_mut().autograd_hook(0).unwrap();
        assert!(d.borrow().rebuilt.is_empty());
        assert_eq!(d.borrow().buckets[0].ready, 0);
        // the no_sync forward cleared require_forward_param_sync: no broadcast
        let second = allocs(&rt, || d.borrow_mut().forward(true).unwrap());
        assert!(second.is_empty(), "{second:?}");
        d.borrow_mut().autograd_hook(1).unwrap();
        d.borrow_mut().autograd_hook(0).unwrap();
        assert_eq!(d.borrow().rebuilt, vec![1, 0]);
        // the next forward rebuilds (1 MiB first bucket: one each) and
        // broadcasts again
        let third = allocs(&rt, || d.borrow_mut().forward(false).unwrap());
        assert_eq!(d.borrow().buckets.len(), 2);
        assert!(
            third.contains(&256) && third.contains(&(512 * 512 * 4)),
            "{third:?}"
        );
    }

    #[test]
    fn an_inference_forward_neither_rebuilds_nor_prepares_hooks() {
        let (rt, d) = wrapped();
        rt.no_grad(|| d.borrow_mut().forward(true)).unwrap();
        assert!(!d.borrow().expect_autograd_hooks);
        assert!(!d.borrow().require_forward_param_sync);
    }

    #[test]
    fn each_dtype_has_its_own_buckets() {
        let t = [(8, DType::BF16), (256, DType::F32), (8, DType::BF16)];
        let b = bucket_assignment(&t, &[1000], None);
        assert_eq!(b, vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn finding_unused_parameters_cuts_buckets_at_once_and_never_rebuilds() {
        // two 1 MiB parameters: the 1 MiB first cap closes a bucket on each
        let (rt, d) = wrapped_with(true);
        assert_eq!(d.borrow().buckets.len(), 2);
        // local_used_map_dev_: an int32 per parameter
        assert_eq!(
            d.borrow()
                .local_used_map_dev
                .as_ref()
                .map(|t| t.sizes().to_vec()),
            Some(vec![2])
        );
        d.borrow_mut().forward(true).unwrap();
        d.borrow_mut().autograd_hook(1).unwrap();
        d.borrow_mut().autograd_hook(0).unwrap();
        assert!(d.borrow().rebuilt.is_empty());
        // the next forward allocates no bucket (only the buffers' broadcast)
        let next = allocs(&rt, || d.borrow_mut().forward(true).unwrap());
        assert_eq!(next, vec![256]);
    }

    #[test]
    fn without_finding_unused_parameters_one_bucket_and_no_used_map() {
        let (_rt, d) = wrapped();
        assert_eq!(d.borrow().buckets.len(), 1);
        assert!(d.borrow().local_used_map_dev.is_none());
    }

    #[test]
    fn the_sink_clones_only_outputs_with_a_grad_fn() {
        let rt = Runtime::default();
        let w = rt.empty(&[4, 4], DType::F32, Device::Cuda).unwrap();
        w.requires_grad_(true).unwrap();
        let y = w.mul_scalar(2.0).unwrap();
        let plain = rt.empty(&[4], DType::F32, Device::Cuda).unwrap();
        let (ys, ps) = (y.clone(), plain.clone());
        let out = sink(&rt, vec![Some(y), Some(plain), None]).unwrap();
        assert!(!out[0].as_ref().unwrap().same(&ys));
        assert!(out[0].as_ref().unwrap().grad_fn_name().is_some());
        assert!(out[1].as_ref().unwrap().same(&ps));
        assert!(out[2].is_none());
    }
}
