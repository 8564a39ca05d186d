//! FSDP2 as one rank runs it (`torch/distributed/fsdp/_fully_shard/`,
//! PyTorch 2.11): `fully_shard` on every decoder layer, then on the model
//! (the root), and the hooks it registers, each allocation on the stream
//! PyTorch makes it on.
//!
//! - `fully_shard(module)` (`_fsdp_init._move_states_to_device`, then
//!   `FSDPParam._init_sharded_param`): every parameter of the unit is copied
//!   to the GPU, then each gets its padded shard (`new_zeros` of
//!   `chunks[0].size()`, dim-0 chunks as `torch.chunk` cuts them), then the
//!   full copies go when `fully_shard` returns;
//! - forward (`FSDPParamGroup.pre_forward` → `unshard` + `wait_for_unshard`):
//!   on the all-gather copy-in stream, the bf16 copy of the shards under a
//!   `param_dtype` (`_get_param_all_gather_inputs`) and the all-gather output
//!   (`foreach_all_gather`); on the current stream, each parameter's
//!   unsharded storage (`alloc_storage` of `all_gather_outputs`) and
//!   `split_with_sizes_copy`'s packed metadata (`pack_vecs`,
//!   `aten/src/ATen/native/cuda/TensorShape.cu`). In forward the output
//!   is kept until the next unit's copy-out (`comm_ctx.all_gather_state`)
//!   and the root's post-forward; `post_forward` frees the unsharded
//!   storages (`free_storage`) unless `reshard_after_forward` is off (the
//!   root's default);
//! - backward: a hook on each unit's outputs (`pre_backward`) unshards it and
//!   prefetches the unit that ran before it in forward; the
//!   `RegisterPostBackwardFunction` on its inputs (`post_backward`) reshards
//!   it and reduce-scatters its gradients (`foreach_reduce`): the padded
//!   input on the current stream (`chunk_cat`, with its packed metadata),
//!   the unsharded gradients freed, the output on the reduce-scatter stream,
//!   whose views become the sharded `.grad`s; the previous unit's input is
//!   freed first (`comm_ctx.reduce_scatter_state`). The root, whose inputs
//!   need no gradient, reduces in the final callback, which also drops the
//!   last reduce-scatter input.
//! - `set_requires_gradient_sync(False)` (gradient accumulation): a unit's
//!   `post_backward` reshards and keeps its unsharded gradients, each cast
//!   to `reduce_dtype` where it differs (`to_accumulated_grad_if_needed`)
//!   and the next micro-batch's added into it
//!   (`accumulate_unsharded_grad_if_needed`); the backward that syncs
//!   reduce-scatters what was accumulated.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use vramscope_engine::{Category, DType, Device, Runtime, Tensor};

use crate::error::{ModelError, Result};
use crate::families::ModuleHooks;

/// `fully_shard(module, mesh=init_device_mesh("cuda", (world,)), ...)` on
/// every decoder layer and then on the model.
#[derive(Debug, Clone, PartialEq)]
pub struct FsdpConfig {
    /// ranks (the mesh's size), at least 2
    pub world: i64,
    /// the rank whose memory the twin runs
    pub rank: i64,
    /// `MixedPrecisionPolicy(param_dtype=..., reduce_dtype=torch.float32)`
    /// (`None`: no policy)
    pub param_dtype: Option<DType>,
    /// `reshard_after_forward=None` (FSDP2's default: `True` for the layers,
    /// `False` for the root); `false`: `reshard_after_forward=False` on
    /// every unit
    pub reshard_after_forward: bool,
    /// `offload_policy=CPUOffloadPolicy()`: the shards, their gradients and
    /// the optimizer on the CPU (pinned)
    pub cpu_offload: bool,
}

/// `FSDPCommContext.lazy_init`'s streams (allocator pools are per stream);
/// the current stream is 0.
const COPY_IN_STREAM: u64 = 1;
const REDUCE_SCATTER_STREAM: u64 = 3;

/// `TensorShape.cu`: `BLOCK_SIZE * BYTES_PER_THREAD`.
const TILE_SIZE: i64 = 128 * 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Training {
    Idle,
    Forward,
    PreBackward,
    PostBackward,
}

/// One `FSDPParam`.
struct Param {
    /// the module's parameter: its storage is the all-gather output
    /// (`all_gather_outputs[0]`), empty while sharded; its dtype is the one
    /// it is all-gathered in
    unsharded: Tensor,
    /// `orig_dtype`: the shard's dtype
    orig: DType,
    shape: Vec<i64>,
    /// elements per dim-0 row
    rest: i64,
    /// `chunks[0].size(0)`: the padded shard's rows
    padded_rows: i64,
    /// this rank's rows
    rows: i64,
    /// `_sharded_param_data` (the padded shard; its storage)
    _data: Tensor,
    /// `sharded_param`: the rank's rows of it, what the optimizer steps
    sharded: Tensor,
    /// `unsharded_accumulated_grad`: the micro-batches' unsharded gradient
    /// in `reduce_dtype`, kept while gradients are not synced
    accumulated: Option<Tensor>,
}

impl Param {
    fn padded_numel(&self) -> i64 {
        self.padded_rows * self.rest
    }
    /// The dtype it is all-gathered in.
    fn gather(&self) -> DType {
        self.unsharded.dtype()
    }
    /// `param_dtype` after `init_dtype_attrs`: `None` where it is the
    /// parameter's own dtype.
    fn param_dtype(&self) -> Option<DType> {
        Some(self.gather()).filter(|&d| d != self.orig)
    }
    fn sharded_shape(&self) -> Vec<i64> {
        let mut s = self.shape.clone();
        s[0] = self.rows;
        s
    }
}

/// One `FSDPParamGroup` (a unit: the root or a decoder layer).
struct Group {
    params: Vec<Param>,
    reshard_after_forward: bool,
    unsharded: bool,
    /// a pending all-gather's output (`_all_gather_result`)
    all_gather: Option<Tensor>,
    training: Training,
    post_forward_indices: Vec<usize>,
}

/// The FSDP state of one rank: its units (0 the root, 1 + i layer i) and
/// what the communication context holds between them.
pub struct Fsdp {
    rt: Runtime,
    cfg: FsdpConfig,
    groups: Vec<Group>,
    /// `comm_ctx.all_gather_state`: the last forward all-gather's output
    all_gather_state: Option<Tensor>,
    /// `comm_ctx.reduce_scatter_state`: the last reduce-scatter's input
    reduce_scatter_state: Option<Tensor>,
    post_forward_order: Vec<usize>,
    callback_queued: bool,
    /// NCCL's first forward and first backward shares taken
    nccl_taken: (bool, bool),
    /// every unit's `reduce_grads` (`set_requires_gradient_sync`)
    reduce_grads: bool,
    me: Weak<RefCell<Fsdp>>,
}

/// `torch.chunk(dim0 rows, world)` as `_chunk_with_empty` pads it: the rows
/// of every chunk (`ceil(dim0 / world)`) and those of `rank`'s.
fn chunk_rows(dim0: i64, world: i64, rank: i64) -> (i64, i64) {
    let c = (dim0 + world - 1) / world;
    (c, (dim0 - rank * c).clamp(0, c))
}

fn div_up(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

impl Fsdp {
    /// `fully_shard(layer)` for each of `layers` (their parameters, in
    /// registration order), then `fully_shard(model)` over `root` (the
    /// parameters in no layer), `move_buffers` moving the model's buffers
    /// to the GPU after its parameters as `_move_states_to_device` does.
    /// The parameters are the unsharded ones, on the device with empty
    /// storages in the dtype they are all-gathered in; `orig` gives each
    /// one's dtype before any cast (the model's, or a LoRA adapter's).
    pub fn shard(
        rt: &Runtime,
        cfg: &FsdpConfig,
        orig: &dyn Fn(&Tensor) -> DType,
        layers: Vec<Vec<Tensor>>,
        root: Vec<Tensor>,
        move_buffers: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Rc<RefCell<Fsdp>>> {
        if cfg.world < 2 || cfg.rank < 0 || cfg.rank >= cfg.world {
            return Err(ModelError::Unsupported(format!(
                "FSDP over {} ranks as rank {} (at least 2 ranks, rank in 0..world)",
                cfg.world, cfg.rank
            )));
        }
        // init_process_group ran before: NCCL's communicator
        super::nccl::init_process_group(rt, cfg.world)?;
        let mut groups: Vec<Option<Group>> = (0..=layers.len()).map(|_| None).collect();
        for (i, ps) in layers.into_iter().enumerate() {
            groups[1 + i] = Some(fully_shard(rt, cfg, orig, ps, true, &mut || Ok(()))?);
        }
        // the root keeps its parameters unsharded after forward under the
        // default (`_lazy_init`: `post_forward_mesh_info = None` when auto)
        groups[0] = Some(fully_shard(rt, cfg, orig, root, false, move_buffers)?);
        let groups = groups.into_iter().flatten().collect();
        let me = Rc::new(RefCell::new(Fsdp {
            rt: rt.clone(),
            cfg: cfg.clone(),
            groups,
            all_gather_state: None,
            reduce_scatter_state: None,
            post_forward_order: Vec::new(),
            callback_queued: false,
            nccl_taken: (false, false),
            reduce_grads: true,
            me: Weak::new(),
        }));
        me.borrow_mut().me = Rc::downgrade(&me);
        Ok(me)
    }

    /// The sharded parameter of each of `params` (the model's, unsharded), in
    /// that order: what `model.parameters()` gives the optimizer.
    pub fn sharded_parameters(&self, params: &[Tensor]) -> Vec<Tensor> {
        params
            .iter()
            .filter_map(|p| {
                self.groups
                    .iter()
                    .flat_map(|g| &g.params)
                    .find(|q| q.unsharded.same(p))
                    .map(|q| q.sharded.clone())
            })
            .collect()
    }

    /// `model.set_requires_gradient_sync(sync)` (recursing into every
    /// unit): whether the next backwards reduce-scatter.
    pub fn set_requires_gradient_sync(&mut self, sync: bool) {
        self.reduce_grads = sync;
    }

    /// `reduce_dtype`: float32 under a policy, cleared when it equals the
    /// parameter dtype (`init_dtype_attrs`).
    fn reduce_dtype(&self) -> Option<DType> {
        self.cfg
            .param_dtype
            .map(|_| DType::F32)
            .filter(|&r| Some(r) != self.cfg.param_dtype)
    }

    fn unshard(&mut self, gi: usize) -> Result<()> {
        let g = &self.groups[gi];
        if g.all_gather.is_some() || g.unsharded {
            return Ok(());
        }
        let rt = self.rt.clone();
        let (out_dtype, total) = all_gather_input(&g.params);
        let world = self.cfg.world;
        // in forward and pre-backward, on the copy-in stream (`get_all_gather_streams`)
        let offload = self.cfg.cpu_offload;
        // (padded shard numel, orig dtype, param_dtype) per parameter
        let shards: Vec<(i64, DType, Option<DType>)> = g
            .params
            .iter()
            .map(|p| (p.padded_numel(), p.orig, p.param_dtype()))
            .collect();
        let out = rt.with_stream(COPY_IN_STREAM, || -> Result<Tensor> {
            rt.with_category(Category::Communication, || {
                if offload {
                    // `FSDPParam.all_gather_inputs` per parameter (no foreach
                    // fast path): the shard copied to the GPU, then cast to
                    // `param_dtype` (the copy freed); the inputs go last first
                    // once the output is allocated
                    let mut inputs = Vec::with_capacity(shards.len());
                    for &(n, orig, pd) in &shards {
                        let copy = rt.empty(&[n], orig, Device::Cuda)?;
                        inputs.push(match pd {
                            Some(d) => {
                                let c = rt.empty(&[n], d, Device::Cuda)?;
                                drop(copy);
                                c
                            }
                            None => copy,
                        });
                    }
                    let out = rt.empty(&[total * world], out_dtype, Device::Cuda)?;
                    while let Some(i) = inputs.pop() {
                        drop(i);
                    }
                    return Ok(out);
                }
                // `_get_param_all_gather_inputs`: one flat copy of the shards
                // that have a `param_dtype`, in the first one's
                let cast: Vec<(i64, DType)> = shards
                    .iter()
                    .filter_map(|&(n, _, pd)| pd.map(|d| (n, d)))
                    .collect();
                let flat = match cast.first() {
                    Some(&(_, d)) => {
                        let n: i64 = cast.iter().map(|c| c.0).sum();
                        Some(rt.empty(&[n], d, Device::Cuda)?)
                    }
                    None => None,
                };
                let out = rt.empty(&[total * world], out_dtype, Device::Cuda)?;
                drop(flat);
                Ok(out)
            })
        })?;
        self.groups[gi].all_gather = Some(out);
        if !self.nccl_taken.0 {
            self.nccl_taken.0 = true;
            super::nccl::fsdp_first_all_gather(&rt)?;
        }
        Ok(())
    }

    fn wait_for_unshard(&mut self, gi: usize) -> Result<()> {
        let Some(out) = self.groups[gi].all_gather.take() else {
            return Ok(());
        };
        let forward = self.groups[gi].training == Training::Forward;
        // the previous unit's all-gather output: `comm_ctx.all_gather_state`
        // is cleared now, but the local `prev_all_gather_state` holds it
        // until `wait_for_unshard` returns (the GPU's traces free it after
        // the copy-out)
        let prev = if forward {
            self.all_gather_state.take()
        } else {
            None
        };
        let dtype = out.dtype();
        let world = self.cfg.world;
        let rt = self.rt.clone();
        let g = &self.groups[gi];
        // `init_all_gather_outputs`: each in the dtype it was gathered in
        for p in &g.params {
            let bytes = (p.padded_numel() * world) as u64 * p.gather().size();
            p.unsharded
                .resize_storage(bytes, "all_gather_copy_out", Category::Parameter)?;
        }
        // split_with_sizes_copy's packed metadata (`pack_vecs`): of bytes
        // when the output is uint8
        let splits: Vec<i64> = g
            .params
            .iter()
            .map(|p| p.padded_numel() * (p.gather().size() / dtype.size()) as i64)
            .collect();
        let elems = split_copy_pack_elems(&splits, dtype.size() as i64, world, &rt);
        rt.with_category(Category::Workspace, || {
            rt.empty(&[elems], DType::I64, Device::Cuda).map(drop)
        })?;
        self.groups[gi].unsharded = true;
        if forward {
            self.all_gather_state = Some(out);
        } else {
            drop(out);
        }
        drop(prev);
        Ok(())
    }

    fn reshard(&mut self, gi: usize) {
        let g = &mut self.groups[gi];
        if g.unsharded {
            for p in &g.params {
                p.unsharded.free_storage();
            }
            g.unsharded = false;
        }
    }

    /// `FSDPState._pre_forward` of unit `gi`: all-gather it, and wrap the
    /// input that needs a gradient in `RegisterPostBackwardFunction`.
    fn pre_forward(&mut self, gi: usize, input: Option<&Tensor>) -> Result<Option<Tensor>> {
        self.groups[gi].training = Training::Forward;
        self.unshard(gi)?;
        self.wait_for_unshard(gi)?;
        let Some(x) = input else { return Ok(None) };
        if !(self.rt.is_grad_enabled() && x.requires_grad()) {
            return Ok(None);
        }
        let me = self.me.clone();
        let out = vramscope_engine::function::apply(
            &self.rt,
            "RegisterPostBackwardFunctionBackward",
            &[x],
            |_, xs| Ok(xs[0].alias()),
            move |_, grads| {
                if let Some(m) = me.upgrade() {
                    m.borrow_mut().post_backward(gi)?;
                }
                Ok(grads.to_vec())
            },
        )?;
        Ok(Some(out))
    }

    /// `FSDPState._post_forward`: reshard, record the order, hook the
    /// outputs for the pre-backward; the root drops the last all-gather.
    fn post_forward(&mut self, gi: usize, outputs: &[&Tensor]) -> Result<()> {
        if self.groups[gi].reshard_after_forward {
            self.reshard(gi);
        }
        let idx = self.post_forward_order.len();
        self.post_forward_order.push(gi);
        self.groups[gi].post_forward_indices.push(idx);
        self.groups[gi].training = Training::Idle;
        if self.rt.is_grad_enabled() {
            for o in outputs {
                if o.requires_grad() && o.grad_fn_name().is_some() {
                    let me = self.me.clone();
                    o.register_grad_hook(Rc::new(move || match me.upgrade() {
                        Some(m) => m.borrow_mut().pre_backward(gi),
                        None => Ok(()),
                    }))
                    .map_err(ModelError::Engine)?;
                }
            }
        }
        if gi == 0 {
            self.all_gather_state = None;
        }
        Ok(())
    }

    /// `FSDPState._pre_backward` → `FSDPParamGroup.pre_backward`.
    fn pre_backward(&mut self, gi: usize) -> vramscope_engine::Result<()> {
        if !self.callback_queued {
            self.callback_queued = true;
            let me = self.me.clone();
            self.rt.queue_callback(Rc::new(move || match me.upgrade() {
                Some(m) => m.borrow_mut().final_callback(),
                None => Ok(()),
            }));
        }
        if self.groups[gi].training == Training::PreBackward {
            return Ok(());
        }
        self.groups[gi].training = Training::PreBackward;
        self.unshard(gi).map_err(to_engine)?;
        self.wait_for_unshard(gi).map_err(to_engine)?;
        // _backward_prefetch: the unit that ran before this one in forward
        if let Some(idx) = self.groups[gi].post_forward_indices.pop() {
            if idx >= 1 {
                let target = self.post_forward_order[idx - 1];
                let old = self.groups[target].training;
                self.groups[target].training = Training::PreBackward;
                let r = self.unshard(target);
                self.groups[target].training = old;
                r.map_err(to_engine)?;
            }
        }
        Ok(())
    }

    /// `FSDPParamGroup.post_backward` → `foreach_reduce`.
    fn post_backward(&mut self, gi: usize) -> vramscope_engine::Result<()> {
        if !self.nccl_taken.1 {
            // by the end of the first backward, reduce-scatter or not
            self.nccl_taken.1 = true;
            super::nccl::first_backward(&self.rt).map_err(to_engine)?;
        }
        self.groups[gi].training = Training::PostBackward;
        // accumulate_unsharded_grad_if_needed: in place, the gradient freed
        for p in &self.groups[gi].params {
            if let (Some(acc), Some(g)) = (&p.accumulated, p.unsharded.grad()) {
                acc.add_(&g, 1.0)?;
                p.unsharded.set_grad(None);
            }
        }
        if !self.reduce_grads {
            // reshard_after_backward, then to_accumulated_grad_if_needed:
            // `grad.to(reduce_dtype)`, the gradient freed when it returns
            self.reshard(gi);
            let reduce = self.reduce_dtype();
            let rt = self.rt.clone();
            for p in &mut self.groups[gi].params {
                let Some(r) = reduce else { break };
                let Some(g) = p.unsharded.grad().filter(|g| g.dtype() != r) else {
                    continue;
                };
                p.unsharded.set_grad(None);
                p.accumulated = Some(rt.with_category(Category::Gradient, || g.to_dtype(r))?);
            }
            return Ok(());
        }
        let mut with_grad: Vec<usize> = Vec::new();
        let mut grads: Vec<Tensor> = Vec::new();
        for (k, p) in self.groups[gi].params.iter_mut().enumerate() {
            // an accumulated gradient of the reduce dtype first
            if let Some(a) = p.accumulated.take() {
                with_grad.push(k);
                grads.push(a);
            } else if let Some(g) = p.unsharded.grad() {
                with_grad.push(k);
                grads.push(g);
                p.unsharded.set_grad(None);
            }
        }
        // reshard_after_backward
        self.reshard(gi);
        if grads.is_empty() {
            return Ok(());
        }
        self.reduce_scatter_state = None;
        let rt = self.rt.clone();
        let world = self.cfg.world;
        let grad_dtype = grads[0].dtype();
        let reduce = self.reduce_dtype().unwrap_or(grad_dtype);
        let g = &self.groups[gi];
        let padded: Vec<i64> = with_grad
            .iter()
            .map(|&k| g.params[k].padded_numel() * world)
            .collect();
        let total: i64 = padded.iter().sum();
        let input = rt.with_category(Category::Communication, || {
            rt.empty(&[total], reduce, Device::Cuda)
        })?;
        // chunk_cat: the CUDA kernel (its packed metadata) for the same
        // dtype or bf16 -> fp32; else `_chunk_cat_out`'s composite path: a
        // padded copy of each gradient whose rows do not divide
        // (`_pad_chunk`'s `new_zeros`), `cat_out` into the input, the copies
        // freed after it
        let padded_copies =
            if grad_dtype == reduce || (grad_dtype == DType::BF16 && reduce == DType::F32) {
                let elems = chunk_cat_pack_elems(&padded, world, reduce.size() as i64);
                rt.with_category(Category::Workspace, || {
                    rt.empty(&[elems], DType::I64, Device::Cuda).map(drop)
                })?;
                Vec::new()
            } else {
                let mut v = Vec::new();
                for (&k, gr) in with_grad.iter().zip(&grads) {
                    let p = &g.params[k];
                    if p.shape[0] % world != 0 {
                        v.push(rt.with_category(Category::Temporary, || {
                            rt.zeros(&[p.padded_numel() * world], gr.dtype(), Device::Cuda)
                        })?);
                    }
                }
                v
            };
        drop(padded_copies);
        // `unsharded_grads.clear()` frees them last first (`list.clear`),
        // but the loop over `zip(fsdp_params, unsharded_grads)` leaves its
        // variable bound to the last one until `foreach_reduce` returns
        let last = grads.pop();
        while let Some(gr) = grads.pop() {
            drop(gr);
        }
        // the group's `_orig_dtype`: its trainable parameters' (uniform)
        let orig = g.params[with_grad[0]].orig;
        let out = rt.with_stream(
            REDUCE_SCATTER_STREAM,
            || -> vramscope_engine::Result<Tensor> {
                let out = rt.with_category(Category::Gradient, || {
                    rt.empty(&[total / world], reduce, Device::Cuda)
                })?;
                if reduce != orig {
                    let c = rt.with_category(Category::Gradient, || out.to_dtype(orig))?;
                    drop(out);
                    return Ok(c);
                }
                Ok(out)
            },
        )?;
        let mut off = 0;
        for &k in &with_grad {
            let p = &g.params[k];
            let n = p.rows * p.rest;
            let mut view = out.narrow(0, off, n).view(&p.sharded_shape())?;
            if self.cfg.cpu_offload {
                // `new_sharded_grad.to("cpu")` (pinned)
                view = rt.empty(&p.sharded_shape(), view.dtype(), Device::Cpu)?;
            }
            match p.sharded.grad() {
                Some(acc) => acc.add_(&view, 1.0)?,
                None => p.sharded.set_grad(Some(view)),
            }
            off += p.padded_numel();
        }
        // under offload the output goes with `foreach_reduce`'s locals,
        // after the last unsharded gradient (the GPU's traces)
        drop(last);
        drop(out);
        self.reduce_scatter_state = Some(input);
        Ok(())
    }

    /// `FSDPState._root_post_backward_final_callback`.
    fn final_callback(&mut self) -> vramscope_engine::Result<()> {
        for gi in 0..self.groups.len() {
            if self.groups[gi].training != Training::PostBackward {
                self.post_backward(gi)?;
            }
            let g = &mut self.groups[gi];
            g.training = Training::Idle;
            g.all_gather = None;
            g.post_forward_indices.clear();
        }
        self.post_forward_order.clear();
        self.reduce_scatter_state = None;
        self.callback_queued = false;
        Ok(())
    }
}

fn to_engine(e: ModelError) -> vramscope_engine::EngineError {
    match e {
        ModelError::Engine(e) => e,
        other => vramscope_engine::EngineError::Unsupported {
            what: other.to_string(),
        },
    }
}

/// `fully_shard` over one unit's parameters.
fn fully_shard(
    rt: &Runtime,
    cfg: &FsdpConfig,
    orig: &dyn Fn(&Tensor) -> DType,
    params: Vec<Tensor>,
    layer: bool,
    move_buffers: &mut dyn FnMut() -> Result<()>,
) -> Result<Group> {
    // _move_states_to_device: `tensor.data = tensor.to(device)`, parameters
    // first, then buffers
    let full: Vec<Tensor> = params
        .iter()
        .map(|p| {
            rt.with_category(Category::Parameter, || {
                rt.empty(p.sizes(), orig(p), Device::Cuda)
            })
        })
        .collect::<vramscope_engine::Result<_>>()?;
    move_buffers()?;
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        let shape = p.sizes().to_vec();
        if shape.is_empty() {
            return Err(ModelError::Unsupported("FSDP of a 0-dim parameter".into()));
        }
        let rest: i64 = shape[1..].iter().product();
        let (padded_rows, rows) = chunk_rows(shape[0], cfg.world, cfg.rank);
        let orig = orig(&p);
        // padded_sharded_param = param_data.new_zeros(padded_sharded_size)
        let mut data = rt.with_category(Category::Parameter, || {
            rt.zeros(&[padded_rows * rest], orig, Device::Cuda)
        })?;
        if cfg.cpu_offload {
            // `padded_sharded_param.cpu().pin_memory()`: the GPU copy freed
            let host = rt.empty(&[padded_rows * rest], orig, Device::Cpu)?;
            drop(std::mem::replace(&mut data, host));
        }
        let mut sshape = shape.clone();
        sshape[0] = rows;
        let sharded = data.narrow(0, 0, rows * rest).view(&sshape)?.detach();
        // `self.sharded_param.requires_grad_(param.requires_grad)`
        sharded.requires_grad_(p.requires_grad())?;
        out.push(Param {
            orig,
            unsharded: p,
            shape,
            rest,
            padded_rows,
            rows,
            _data: data,
            sharded,
            accumulated: None,
        });
    }
    // the full copies go when `fully_shard` returns, first to last (the
    // GPU's traces: `validation/multi/trace_diff.py`)
    drop(full);
    Ok(Group {
        params: out,
        reshard_after_forward: layer && cfg.reshard_after_forward,
        unsharded: false,
        all_gather: None,
        training: Training::Idle,
        post_forward_indices: Vec::new(),
    })
}

/// `_get_all_gather_input_metadatas`: the all-gather's dtype (the inputs',
/// or uint8 where they differ) and its input's elements (bytes then).
fn all_gather_input(params: &[Param]) -> (DType, i64) {
    let first = params.first().map(Param::gather).unwrap_or(DType::F32);
    if params.iter().all(|p| p.gather() == first) {
        (first, params.iter().map(Param::padded_numel).sum())
    } else {
        let bytes = params
            .iter()
            .map(|p| p.padded_numel() * p.gather().size() as i64)
            .sum();
        (DType::U8, bytes)
    }
}

/// The int64s `split_with_sizes_copy_out_cuda_contiguous_no_cast` packs to
/// the device for splits of `splits` elements of `elem` bytes out of a
/// `(world, sum)` all-gather output: dst and src addresses, chunk sizes,
/// one entry per block and the blocks' cumulative sums (`TensorShape.cu`,
/// its grid from the device's SM count and threads per SM).
fn split_copy_pack_elems(splits: &[i64], elem: i64, world: i64, rt: &Runtime) -> i64 {
    let prof = rt.profile();
    let chunk: Vec<i64> = splits.iter().map(|s| s * elem).collect();
    let num_blocks: i64 = chunk.iter().map(|&c| div_up(c, TILE_SIZE)).sum();
    // num_sms * max_threads_per_sm / BLOCK_SIZE * 2.0
    let max_blocks = (prof.sm_count as i64 * prof.max_threads_per_sm as i64 / 128) * 2;
    let iter_factor = div_up(num_blocks * world, max_blocks);
    let chunks_per_block = ((iter_factor as f64).sqrt().ceil() as i64).min(world);
    let iters_per_chunk = div_up(iter_factor, chunks_per_block);
    let blocks: i64 = chunk
        .iter()
        .map(|&c| div_up(c, TILE_SIZE * iters_per_chunk))
        .sum();
    let n = splits.len() as i64;
    3 * n + blocks + (n + 1)
}

/// The int64s `get_chunk_cat_metadata` packs for tensors whose padded sizes
/// are `padded` elements, cut into `world` chunks of `dst_elem`-byte
/// elements: sources, one entry per block, the start offsets and block
/// indices (`n + 1` each), the actual and padded sizes and block counts.
fn chunk_cat_pack_elems(padded: &[i64], world: i64, dst_elem: i64) -> i64 {
    let blocks: i64 = padded
        .iter()
        .map(|&p| div_up(p * dst_elem / world, TILE_SIZE))
        .sum();
    let n = padded.len() as i64;
    n + blocks + 2 * (n + 1) + 3 * n
}

/// The hooks `fully_shard` registers, as the families call them.
pub struct FsdpHooks(pub Rc<RefCell<Fsdp>>);

impl ModuleHooks for FsdpHooks {
    fn pre_forward(&self, unit: usize, input: Option<&Tensor>) -> Result<Option<Tensor>> {
        self.0.borrow_mut().pre_forward(unit, input)
    }
    fn post_forward(&self, unit: usize, outputs: &[&Tensor]) -> Result<()> {
        self.0.borrow_mut().post_forward(unit, outputs)
    }
}

/// The ranks whose shards have the same rows in every parameter, grouped
/// (rank 0's group first): their memory is the same, so the twin runs one
/// rank of each group. Builds the model (with its LoRA adapters) with empty
/// parameters only.
pub fn rank_classes(
    config: &crate::HfConfig,
    task: crate::Task,
    world: i64,
    lora: Option<&crate::workload::LoraSpec>,
) -> Result<Vec<Vec<i64>>> {
    let rt = Runtime::default();
    rt.set_parameters_on_device_unallocated(Some(DType::F32));
    let mut model = crate::families::build(&rt, config, task, DType::F32)?;
    if let Some(l) = lora {
        model.apply_lora(l, true)?;
    }
    let dims: Vec<i64> = model
        .parameters()
        .iter()
        .map(|p| p.sizes().first().copied().unwrap_or(1))
        .collect();
    let mut classes: Vec<(Vec<i64>, Vec<i64>)> = Vec::new();
    for r in 0..world.max(1) {
        let rows: Vec<i64> = dims.iter().map(|&d| chunk_rows(d, world, r).1).collect();
        match classes.iter_mut().find(|c| c.0 == rows) {
            Some(c) => c.1.push(r),
            None => classes.push((rows, vec![r])),
        }
    }
    Ok(classes.into_iter().map(|c| c.1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_pad_as_torch_chunk_cuts() {
        // 5 rows over 4 ranks: chunks of 2, 2, 1 and an empty one
        assert_eq!(chunk_rows(5, 4, 0), (2, 2));
        assert_eq!(chunk_rows(5, 4, 2), (2, 1));
        assert_eq!(chunk_rows(5, 4, 3), (2, 0));
        assert_eq!(chunk_rows(50257, 2, 1), (25129, 25128));
    }

    /// One layer of one `(5, 4)` parameter under a bf16 `param_dtype` over
    /// 2 ranks, unsharded as a forward would, with a bf16 gradient set as
    /// autograd's `AccumulateGrad` sets it.
    fn one_layer(param_dtype: Option<DType>) -> (Runtime, Rc<RefCell<Fsdp>>, Tensor) {
        let rt = Runtime::default();
        let cfg = FsdpConfig {
            world: 2,
            rank: 0,
            param_dtype,
            reshard_after_forward: true,
            cpu_offload: false,
        };
        rt.set_parameters_on_device_unallocated(Some(param_dtype.unwrap_or(DType::F32)));
        let w = vramscope_engine::nn::parameter(&rt, &[5, 4], DType::F32).unwrap();
        rt.set_parameters_on_device_unallocated(None);
        let f = Fsdp::shard(
            &rt,
            &cfg,
            &|_| DType::F32,
            vec![vec![w.clone()]],
            vec![],
            &mut || Ok(()),
        )
        .unwrap();
        f.borrow_mut().pre_forward(1, None).unwrap();
        (rt, f, w)
    }

    fn backward(rt: &Runtime, f: &Rc<RefCell<Fsdp>>, w: &Tensor) {
        let g = rt.empty(&[5, 4], w.dtype(), Device::Cuda).unwrap();
        match w.grad() {
            Some(acc) => acc.add_(&g, 1.0).unwrap(),
            None => w.set_grad(Some(g)),
        }
        f.borrow_mut().groups[1].training = Training::PreBackward;
        f.borrow_mut().post_backward(1).unwrap();
    }

    #[test]
    fn without_gradient_sync_the_unsharded_gradient_is_kept_in_reduce_dtype() {
        let (rt, f, w) = one_layer(Some(DType::BF16));
        f.borrow_mut().set_requires_gradient_sync(false);
        backward(&rt, &f, &w);
        // to_accumulated_grad_if_needed: the bf16 gradient cast to fp32,
        // the parameter resharded, nothing reduce-scattered
        assert!(w.grad().is_none());
        let acc = f.borrow().groups[1].params[0].accumulated.clone().unwrap();
        assert_eq!(
            (acc.dtype(), acc.sizes().to_vec()),
            (DType::F32, vec![5, 4])
        );
        assert!(!f.borrow().groups[1].unsharded);
        assert!(f.borrow().groups[1].params[0].sharded.grad().is_none());
        // the next micro-batch is added into it (the same tensor)
        f.borrow_mut().pre_forward(1, None).unwrap();
        backward(&rt, &f, &w);
        let again = f.borrow().groups[1].params[0].accumulated.clone().unwrap();
        assert!(again.same(&acc) && w.grad().is_none());
        drop((acc, again));
        // the syncing backward reduce-scatters what was accumulated: rank 0's
        // 3 padded rows of fp32
        f.borrow_mut().set_requires_gradient_sync(true);
        f.borrow_mut().pre_forward(1, None).unwrap();
        backward(&rt, &f, &w);
        let p = &f.borrow().groups[1].params[0];
        assert!(p.accumulated.is_none() && w.grad().is_none());
        let g = p.sharded.grad().unwrap();
        assert_eq!((g.dtype(), g.sizes().to_vec()), (DType::F32, vec![3, 4]));
    }

    #[test]
    fn without_a_reduce_dtype_the_gradient_stays_on_the_parameter() {
        let (rt, f, w) = one_layer(None);
        f.borrow_mut().set_requires_gradient_sync(false);
        backward(&rt, &f, &w);
        assert_eq!(w.grad().unwrap().dtype(), DType::F32);
        assert!(f.borrow().groups[1].params[0].accumulated.is_none());
    }

    #[test]
    fn chunk_cat_packs_one_entry_per_block() {
        // one 512x512 fp32 gradient over 2 ranks: 512 KiB per chunk, 256 blocks
        assert_eq!(chunk_cat_pack_elems(&[512 * 512], 2, 4), 1 + 256 + 4 + 3);
    }

    #[test]
    fn a_frozen_bf16_base_with_fp32_adapters_gathers_bytes_and_reduces_the_adapters() {
        // peft's layer without a policy: a frozen bf16 (6, 4) weight and a
        // float32 (2, 4) adapter, over 2 ranks
        let rt = Runtime::default();
        let cfg = FsdpConfig {
            world: 2,
            rank: 0,
            param_dtype: None,
            reshard_after_forward: true,
            cpu_offload: false,
        };
        let base = rt.device_unallocated(&[6, 4], DType::BF16).unwrap();
        let lora = rt.device_unallocated(&[2, 4], DType::F32).unwrap();
        lora.requires_grad_(true).unwrap();
        let (b, l) = (base.clone(), lora.clone());
        let orig = move |t: &Tensor| t.dtype();
        let f = Fsdp::shard(&rt, &cfg, &orig, vec![vec![b, l]], vec![], &mut || Ok(())).unwrap();
        // _get_all_gather_input_metadatas: uint8, 3 x 4 x 2 + 1 x 4 x 4 bytes
        assert_eq!(
            all_gather_input(&f.borrow().groups[1].params),
            (DType::U8, 24 + 16)
        );
        f.borrow_mut().pre_forward(1, None).unwrap();
        // each unsharded storage in its own dtype
        assert_eq!(
            (base.storage_nbytes(), lora.storage_nbytes()),
            (6 * 4 * 2, 2 * 4 * 4)
        );
        // only the adapter's shard requires grad, and only it is reduced
        {
            let g = &f.borrow().groups[1];
            assert!(!g.params[0].sharded.requires_grad() && g.params[1].sharded.requires_grad());
        }
        lora.set_grad(Some(rt.empty(&[2, 4], DType::F32, Device::Cuda).unwrap()));
        f.borrow_mut().groups[1].training = Training::PreBackward;
        f.borrow_mut().post_backward(1).unwrap();
        let g = &f.borrow().groups[1];
        assert!(g.params[0].sharded.grad().is_none());
        let sg = g.params[1].sharded.grad().unwrap();
        assert_eq!((sg.dtype(), sg.sizes().to_vec()), (DType::F32, vec![1, 4]));
    }
}
