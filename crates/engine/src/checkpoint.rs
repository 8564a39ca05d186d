//! `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` as
//! PyTorch 2.11 implements it (`torch/utils/checkpoint.py`:
//! `_checkpoint_without_reentrant_generator`, `_CheckpointFrame`,
//! `_checkpoint_hook`, `_recomputation_hook`).
//!
//! Forward:
//! - `_NoopSaveInputs.apply(dummy, kwargs, *args)` saves the tensor inputs
//!   (and the 0-element CPU `dummy`) as ordinary saved variables of a node
//!   the frame holds: they live as long as the frame;
//! - `fn` runs under the `_checkpoint_hook` saved-tensor hooks: every tensor a
//!   node saves is packed into a `_Holder` that keeps no storage (the frame
//!   records a weak reference to it, and the tensor's metadata), so the
//!   region's activations die as soon as the program drops them;
//! - the frame is held by the hooks of those saved variables: it (and the
//!   inputs, and whatever `fn` captured) dies when the last node of the
//!   region releases its saved variables in backward;
//! - `preserve_rng_state` stashes the CPU and CUDA generator states, which
//!   are CPU tensors: no device memory.
//!
//! Backward: the first unpack of a holder in a graph task runs `fn` again on
//! the saved inputs, with grad mode on, under the autocast state the forward
//! had (`_get_autocast_kwargs`; its own region, so the cast cache is cleared
//! when the recomputation ends) and under the `_recomputation_hook`, which
//! stores a detached alias of each tensor saved in the recomputation in the
//! frame's `recomputed` table, keyed by a `_Handle` that the matching holder
//! owns. Recomputation stops (`_StopRecomputationError`, `early_stop=True`)
//! right after the tensor whose count matches the forward's: the rest of
//! `fn` never runs. Each unpack hands its tensor to the node and drops the
//! handle, so the table lets go of it: a recomputed tensor is freed as soon
//! as the node that needed it is done with it.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};

use crate::autocast::AutocastConfig;
use crate::autograd::{Packed, Raised, SavedTensorHooks, SavedVar};
use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::runtime::{Category, Runtime};
use crate::tensor::Tensor;

/// The function a checkpoint runs, and runs again to recompute: tensor
/// inputs in, tensor outputs out. Everything else it needs it captures (as
/// the `functools.partial` HF passes captures the layer's keyword arguments:
/// captured tensors live as long as the frame).
pub type CheckpointFn = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>;

/// The keyword arguments of `checkpoint(..., use_reentrant=False)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// `preserve_rng_state` (default `True`): stash and restore the RNG
    /// states; they are CPU tensors, so this changes no device memory.
    pub preserve_rng_state: bool,
    /// `early_stop` (default `True`, or `set_checkpoint_early_stop`): stop
    /// the recomputation once every saved tensor is recomputed.
    pub early_stop: bool,
    /// `determinism_check="default"`: compare the shape, dtype and device of
    /// every recomputed tensor with the forward's (`"none"`: `false`).
    pub determinism_check: bool,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            preserve_rng_state: true,
            early_stop: true,
            determinism_check: true,
        }
    }
}

/// `torch.utils.checkpoint.checkpoint(f, *inputs, use_reentrant=False)`.
pub fn checkpoint(
    rt: &Runtime,
    inputs: &[&Tensor],
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
) -> Result<Vec<Tensor>> {
    checkpoint_with(rt, inputs, CheckpointOptions::default(), f)
}

/// `torch.utils.checkpoint.checkpoint(f, *inputs, use_reentrant=False, ...)`
/// with its options.
pub fn checkpoint_with(
    rt: &Runtime,
    inputs: &[&Tensor],
    opts: CheckpointOptions,
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
) -> Result<Vec<Tensor>> {
    let args: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    // `new_frame.input_saver.grad_fn is None` when grad mode is off: no frame
    if !rt.is_grad_enabled() {
        return f(&args);
    }
    // _get_autocast_kwargs(): recomputation re-enters the forward's state
    let ac = rt.autocast_tls();
    let autocast = AutocastConfig {
        enabled: ac.enabled,
        dtype: Some(ac.dtype),
        cache_enabled: Some(ac.cache_enabled),
    };
    // (preserve_rng_state: torch.get_rng_state() and torch.cuda.get_rng_state()
    // return CPU tensors; fork_rng in the recomputation likewise.)
    let _ = opts.preserve_rng_state;
    // dummy = torch.empty((0,), requires_grad=True), then
    // _NoopSaveInputs.apply(dummy, kwargs, *args): ctx.save_for_backward of
    // the tensors among them, under whatever hooks are set (an enclosing
    // checkpoint's, Rule 2 of "Nestable Checkpoint")
    let dummy = rt.empty(&[0], DType::F32, Device::Cpu)?;
    dummy.requires_grad_(true)?;
    let mut input_saver = vec![SavedVar::new(&dummy, false)];
    input_saver.extend(args.iter().map(|t| SavedVar::new(t, false)));
    drop(dummy);
    let frame = Rc::new(Frame {
        rt: rt.clone(),
        recompute_fn: Rc::new(f),
        input_saver,
        autocast,
        early_stop: opts.early_stop,
        determinism_check: opts.determinism_check,
        weak_holders: RefCell::new(Vec::new()),
        x_metadatas: RefCell::new(Vec::new()),
        recomputed: RefCell::new(HashMap::new()),
        recomp_counter: RefCell::new(HashMap::new()),
        is_recomputed: RefCell::new(HashSet::new()),
        forward_completed: Cell::new(false),
        ignore_saved_mismatch: Cell::new(false),
        next_handle: Cell::new(0),
    });
    let hooks: Rc<dyn SavedTensorHooks> = Rc::new(CheckpointHook {
        frame: frame.clone(),
    });
    let recompute_fn = frame.recompute_fn.clone();
    let out = rt.saved_tensors_hooks(hooks, || recompute_fn(&args));
    drop(recompute_fn);
    frame.forward_completed.set(true);
    drop(args);
    drop(frame);
    out
}

/// The metadata `_default_meta_extractor` records of a saved tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    shape: Dims,
    dtype: DType,
    device: Device,
}

impl Meta {
    fn of(t: &Tensor) -> Meta {
        Meta {
            shape: t.dims(),
            dtype: t.dtype(),
            device: t.device(),
        }
    }
}

/// `_CheckpointFrame`.
struct Frame {
    rt: Runtime,
    recompute_fn: Rc<CheckpointFn>,
    /// the saved variables of `_NoopSaveInputs` (dummy first)
    input_saver: Vec<SavedVar>,
    autocast: AutocastConfig,
    early_stop: bool,
    determinism_check: bool,
    weak_holders: RefCell<Vec<Weak<Holder>>>,
    x_metadatas: RefCell<Vec<Meta>>,
    /// `recomputed[gid]` (a `WeakKeyDictionary[_Handle, Tensor]`), keyed by
    /// handle id: an entry goes when its handle dies
    recomputed: RefCell<HashMap<u64, Tensor>>,
    recomp_counter: RefCell<HashMap<u64, usize>>,
    is_recomputed: RefCell<HashSet<u64>>,
    forward_completed: Cell<bool>,
    ignore_saved_mismatch: Cell<bool>,
    next_handle: Cell<u64>,
}

/// `_Handle`: the key of a recomputed tensor.
struct Handle {
    id: u64,
    frame: Weak<Frame>,
}

impl Drop for Handle {
    /// The `WeakKeyDictionary` entry goes with its key.
    fn drop(&mut self) {
        if let Some(frame) = self.frame.upgrade() {
            let t = frame.recomputed.borrow_mut().remove(&self.id);
            drop(t);
        }
    }
}

/// `_Holder`: what the checkpoint's pack hook returns; `handles[gid]` is the
/// handle of its recomputed tensor in graph task `gid` (`None` once unpacked).
#[derive(Default)]
struct Holder {
    handles: RefCell<HashMap<u64, Option<Rc<Handle>>>>,
}

fn checkpoint_error(detail: impl Into<String>) -> EngineError {
    EngineError::Mismatch {
        op: "torch.utils.checkpoint",
        detail: detail.into(),
    }
}

impl Frame {
    /// `check_recomputed_tensors_match(gid)`.
    fn check_recomputed_tensors_match(&self, gid: u64) -> Result<()> {
        if self.ignore_saved_mismatch.get() {
            return Ok(());
        }
        let holders = self.weak_holders.borrow();
        let counted = self.recomp_counter.borrow().get(&gid).copied().unwrap_or(0);
        if holders.len() != counted {
            return Err(checkpoint_error(format!(
                "A different number of tensors was saved during the original forward and \
                 recomputation.\nNumber of tensors saved during forward: {}\nNumber of tensors \
                 saved during recomputation: {counted}.",
                holders.len()
            )));
        }
        if !self.determinism_check {
            return Ok(());
        }
        let metas = self.x_metadatas.borrow();
        let recomputed = self.recomputed.borrow();
        let mut different = Vec::new();
        for (idx, w) in holders.iter().enumerate() {
            let Some(holder) = w.upgrade() else { continue };
            let handles = holder.handles.borrow();
            let Some(Some(h)) = handles.get(&gid) else {
                return Err(checkpoint_error(
                    "Something went unexpectedly wrong in activation checkpoint",
                ));
            };
            let Some(x) = recomputed.get(&h.id) else {
                return Err(checkpoint_error(
                    "Something went unexpectedly wrong in activation checkpoint",
                ));
            };
            let m = Meta::of(x);
            if m != metas[idx] {
                different.push(format!(
                    "tensor at position {idx}:\nsaved metadata: {:?}\nrecomputed metadata: {m:?}",
                    metas[idx]
                ));
            }
        }
        if !different.is_empty() {
            return Err(checkpoint_error(format!(
                "Recomputed values for the following tensors have different metadata than \
                 during the forward pass.\n{}",
                different.join("\n")
            )));
        }
        Ok(())
    }

    /// The body of `unpack_hook`'s `if not frame.is_recomputed[gid]`.
    fn recompute(self: &Rc<Self>, gid: u64) -> Result<()> {
        let rt = self.rt.clone();
        // ctx.get_args(ctx.saved_tensors): the inputs, without the dummy
        let args: Vec<Tensor> = self.input_saver[1..]
            .iter()
            .map(|s| s.unpack("_NoopSaveInputsBackward"))
            .collect::<Result<_>>()?;
        let hooks: Rc<dyn SavedTensorHooks> = Rc::new(RecomputationHook {
            frame: Rc::downgrade(self),
            gid,
        });
        let f = self.recompute_fn.clone();
        let r = rt.saved_tensors_hooks(hooks, || {
            // torch.autograd.enable_grad(), then recompute_fn's autocast region
            let prev = rt.set_grad_enabled(true);
            let r = rt.autocast_with(self.autocast, || f(&args));
            rt.set_grad_enabled(prev);
            r
        });
        // `except _StopRecomputationError: pass`
        let raised = rt.take_raised();
        match (r, raised) {
            (r, Some(Raised::StopRecomputation)) => drop(r),
            (_, Some(Raised::Error(e))) => return Err(e),
            (Err(e), None) => return Err(e),
            (Ok(outs), None) => drop(outs),
        }
        drop(args);
        self.is_recomputed.borrow_mut().insert(gid);
        self.check_recomputed_tensors_match(gid)
    }
}

/// `_checkpoint_hook`: the saved-tensor hooks of a checkpointed forward.
struct CheckpointHook {
    frame: Rc<Frame>,
}

impl SavedTensorHooks for CheckpointHook {
    fn pack(&self, x: &Tensor) -> Packed {
        let holder = Rc::new(Holder::default());
        self.frame
            .weak_holders
            .borrow_mut()
            .push(Rc::downgrade(&holder));
        if self.frame.determinism_check {
            self.frame.x_metadatas.borrow_mut().push(Meta::of(x));
        }
        holder
    }

    fn unpack(&self, packed: &Packed) -> Result<Tensor> {
        let frame = &self.frame;
        let holder = packed
            .clone()
            .downcast::<Holder>()
            .map_err(|_| checkpoint_error("unpack of an object the checkpoint did not pack"))?;
        let gid = frame.rt.current_graph_task_id();
        if !frame.is_recomputed.borrow().contains(&gid) {
            frame.recompute(gid)?;
        }
        let handle = match holder.handles.borrow().get(&gid) {
            None => {
                return Err(checkpoint_error(
                    "Something went unexpectedly wrong in activation checkpoint \
                     (no recomputed tensor for this holder)",
                ))
            }
            Some(None) => {
                return Err(checkpoint_error(
                    "Unpack is being triggered for a tensor that was already unpacked once.",
                ))
            }
            Some(Some(h)) => h.clone(),
        };
        let ret = frame.recomputed.borrow().get(&handle.id).cloned();
        // holder.handles[gid] = None: the handle dies, and its table entry
        let old = holder.handles.borrow_mut().insert(gid, None);
        drop(old);
        drop(handle);
        ret.ok_or_else(|| checkpoint_error("recomputed tensor missing"))
    }
}

/// `_recomputation_hook`: the saved-tensor hooks of a recomputation.
struct RecomputationHook {
    frame: Weak<Frame>,
    gid: u64,
}

impl SavedTensorHooks for RecomputationHook {
    fn pack(&self, x: &Tensor) -> Packed {
        // x.detach() if x.requires_grad else x (the twin always takes an
        // alias: an output is saved before its grad_fn is set)
        let x = x.tensor_data();
        let Some(frame) = self.frame.upgrade() else {
            return Rc::new(x);
        };
        let rt = frame.rt.clone();
        if rt.hook_raised() {
            // the op that would have run after the exception
            return Rc::new(x);
        }
        let gid = self.gid;
        let recomp_idx = {
            let mut c = frame.recomp_counter.borrow_mut();
            let e = c.entry(gid).or_insert(0);
            *e += 1;
            *e - 1
        };
        let n = frame.weak_holders.borrow().len();
        if recomp_idx >= n {
            if frame.early_stop {
                rt.raise_from_hook(Raised::Error(checkpoint_error(
                    "Unexpected state: target_frame.early_stop is set",
                )));
            } else if !frame.forward_completed.get() {
                frame.ignore_saved_mismatch.set(true);
            } else {
                rt.raise_from_hook(Raised::Error(checkpoint_error(
                    "trying to save more tensors during recomputation than during the \
                     original forward pass.",
                )));
            }
            return Rc::new(x);
        }
        let holder = frame.weak_holders.borrow()[recomp_idx].upgrade();
        if let Some(holder) = holder {
            let id = frame.next_handle.get();
            frame.next_handle.set(id + 1);
            let handle = Rc::new(Handle {
                id,
                frame: Rc::downgrade(&frame),
            });
            x.set_category_if(Category::Output, Category::SavedForBackward);
            let old = frame.recomputed.borrow_mut().insert(id, x.clone());
            drop(old);
            let old = holder.handles.borrow_mut().insert(gid, Some(handle));
            drop(old);
        }
        let counted = frame
            .recomp_counter
            .borrow()
            .get(&gid)
            .copied()
            .unwrap_or(0);
        if frame.early_stop && counted == n {
            rt.raise_from_hook(Raised::StopRecomputation);
        }
        Rc::new(x)
    }

    fn unpack(&self, packed: &Packed) -> Result<Tensor> {
        packed
            .downcast_ref::<Tensor>()
            .cloned()
            .ok_or_else(|| checkpoint_error("unpack of an object the recomputation did not pack"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackwardOptions;
    use vramscope_alloc::TraceAction;

    const MB: u64 = 1 << 20;
    const N: i64 = 1024;

    /// Allocations (`+bytes`) and frees (`-bytes`) recorded since the last call.
    fn events(rt: &Runtime) -> Vec<i64> {
        let t = rt.trace();
        rt.record_memory_history(false);
        rt.record_memory_history(true);
        t.iter()
            .filter_map(|e| match e.action {
                TraceAction::Alloc => Some(e.size as i64),
                TraceAction::FreeCompleted => Some(-(e.size as i64)),
                _ => None,
            })
            .collect()
    }

    struct Mlp {
        rt: Runtime,
        w1: Tensor,
        w2: Tensor,
        x0: Tensor,
    }

    /// Two 1024x1024 fp32 layers (4 MiB per activation) with the cuBLAS
    /// workspace of the main thread already allocated.
    fn mlp() -> Mlp {
        let rt = Runtime::default();
        let p = |shape: &[i64]| {
            let t = rt.randn(shape, DType::F32, Device::Cuda).unwrap();
            t.requires_grad_(true).unwrap();
            t
        };
        let (w1, w2, x0) = (p(&[N, N]), p(&[N, N]), p(&[N, N]));
        rt.no_grad(|| x0.mm(&x0).unwrap());
        Mlp { rt, w1, w2, x0 }
    }

    /// `relu(x @ w1) @ w2`, dropping `x @ w1` as soon as relu has it.
    fn block(w1: &Tensor, w2: &Tensor) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static {
        let (w1, w2) = (w1.clone(), w2.clone());
        move |a: &[Tensor]| {
            let h = a[0].mm(&w1)?;
            let r = h.relu()?;
            drop(h);
            Ok(vec![r.mm(&w2)?])
        }
    }

    #[test]
    fn forward_keeps_only_the_inputs_and_backward_recomputes_once() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let g = rt.randn(&[N, N], DType::F32, Device::Cuda).unwrap();
        let base = rt.memory_allocated() as u64;
        rt.record_memory_history(true);
        let y = checkpoint(rt, &[&x], block(&m.w1, &m.w2))
            .unwrap()
            .remove(0);
        // h, r (h dies when relu has run), y; r is not kept: its holder has no storage
        let mb = MB as i64;
        assert_eq!(events(rt), vec![4 * mb, 4 * mb, -4 * mb, 4 * mb, -4 * mb]);
        assert_eq!(rt.memory_allocated() as u64 - base, 4 * MB, "only y");
        // the two mm and relu saved 5 tensors, all as holders
        let n = y.grad_fn().unwrap();
        assert_eq!((n.num_saved(), n.saved_bytes()), (2, 0));

        y.backward_with(Some(g), BackwardOptions::default())
            .unwrap();
        let ws = rt.profile().cublas_workspace as i64;
        assert_eq!(
            events(rt),
            vec![
                // MmBackward0 of the second mm unpacks first: the recomputation
                // (on the autograd thread: its own cuBLAS workspace), which
                // stops at that mm's saves, before its output
                4 * mb,
                ws,
                4 * mb,
                -4 * mb,
                // grad of r, grad of w2
                4 * mb,
                4 * mb,
                // ReluBackward0: grad of h; then r (unpacked, its last
                // reference) and the incoming gradient die
                4 * mb,
                -4 * mb,
                -4 * mb,
                // the first MmBackward0: grad of x, grad of w1; its input dies
                4 * mb,
                4 * mb,
                -4 * mb,
                // MulBackward0 (x0 * 1), then its input
                4 * mb,
                -4 * mb,
                // the caller's gradient, dropped after the engine returns
                -4 * mb,
            ]
        );
        drop((y, x));
        assert_eq!(m.w1.grad().unwrap().dtype(), DType::F32);
    }

    #[test]
    fn without_checkpoint_r_is_saved() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let base = rt.memory_allocated() as u64;
        let y = block(&m.w1, &m.w2)(std::slice::from_ref(&x))
            .unwrap()
            .remove(0);
        assert_eq!(rt.memory_allocated() as u64 - base, 8 * MB, "r and y");
        drop(y);
    }

    #[test]
    fn no_early_stop_runs_the_whole_function_again() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let g = rt.randn(&[N, N], DType::F32, Device::Cuda).unwrap();
        let opts = CheckpointOptions {
            early_stop: false,
            ..Default::default()
        };
        let y = checkpoint_with(rt, &[&x], opts, block(&m.w1, &m.w2))
            .unwrap()
            .remove(0);
        rt.record_memory_history(true);
        y.backward_with(Some(g), BackwardOptions::default())
            .unwrap();
        let mb = MB as i64;
        let ws = rt.profile().cublas_workspace as i64;
        // the recomputed y (4 MiB) is allocated and dropped with the recomputation
        assert_eq!(
            &events(rt)[..6],
            &[4 * mb, ws, 4 * mb, -4 * mb, 4 * mb, -4 * mb]
        );
    }

    /// The frame keeps the inputs (`_NoopSaveInputs`' saved tensors) until
    /// the last saved variable of the region is released; a region that
    /// saves nothing has no holder, so its frame dies at once.
    #[test]
    fn the_frame_holds_the_inputs_until_backward_is_done_with_the_region() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let base = rt.memory_allocated();
        let y = checkpoint(rt, &[&x], block(&m.w1, &m.w2))
            .unwrap()
            .remove(0);
        drop(x);
        let mb = MB as i64;
        assert_eq!(
            rt.memory_allocated() - base,
            4 * mb,
            "x lives on in the frame"
        );
        let s = y.sum().unwrap();
        drop(y);
        s.backward().unwrap();
        drop(s);
        // x, y and every activation gone; the grads of w1, w2 and x0 stay
        assert_eq!(
            rt.memory_allocated() - base,
            -4 * mb + 12 * mb + rt.profile().cublas_workspace as i64
        );

        let x = &m.x0 * 1.0;
        let base = rt.memory_allocated();
        let y = checkpoint(rt, &[&x], |a: &[Tensor]| Ok(vec![a[0].add_scalar(1.0)?]))
            .unwrap()
            .remove(0);
        drop(x);
        assert_eq!(
            rt.memory_allocated() - base,
            0,
            "x freed: nothing held the frame"
        );
        drop(y);
    }

    /// Each graph task recomputes once (`is_recomputed[gid]`): a second
    /// backward through a retained graph recomputes again, and the
    /// recomputed tensors never outlive their unpack (Rule 4).
    #[test]
    fn every_backward_recomputes_and_frees_what_it_unpacks() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let y = checkpoint(rt, &[&x], block(&m.w1, &m.w2))
            .unwrap()
            .remove(0);
        let s = y.sum().unwrap();
        let retain = BackwardOptions { retain_graph: true };
        s.backward_with(None, retain).unwrap();
        let after_first = rt.memory_allocated();
        rt.record_memory_history(true);
        s.backward_with(None, retain).unwrap();
        let ev = events(rt);
        let mb = MB as i64;
        // the root gradient, then the recomputation again: h, r, then h dies
        assert_eq!(&ev[..4], &[4, 4 * mb, 4 * mb, -4 * mb]);
        // the grads accumulate in place: nothing more stays
        assert_eq!(rt.memory_allocated(), after_first);
        drop((s, y, x));
    }

    #[test]
    fn no_frame_without_grad_mode() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let y = rt
            .no_grad(|| checkpoint(rt, &[&x], block(&m.w1, &m.w2)))
            .unwrap()
            .remove(0);
        assert!(y.grad_fn().is_none());
    }

    /// A nondeterministic function is caught, as `check_recomputed_tensors_match` does.
    #[test]
    fn a_different_recomputation_is_an_error() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let calls = Rc::new(Cell::new(0));
        let c = calls.clone();
        let w1 = m.w1.clone();
        let y = checkpoint(rt, &[&x], move |a: &[Tensor]| {
            c.set(c.get() + 1);
            let h = if c.get() == 1 {
                a[0].mm(&w1)?
            } else {
                a[0].narrow(0, 0, 512).mm(&w1)?
            };
            Ok(vec![h.exp()?])
        })
        .unwrap()
        .remove(0);
        let err = y.sum().unwrap().backward().unwrap_err();
        assert!(err.to_string().contains("different metadata"), "{err}");
        assert_eq!(calls.get(), 2);
    }

    /// Under autocast the forward's low-precision weight copy lives in the
    /// cache until the region exits (the checkpoint's holder does not keep
    /// it); the recomputation re-enters bf16 autocast on the autograd
    /// thread, casts again, stops at the mm's saves, and its cache is
    /// cleared at its end while the recomputed table keeps the copies until
    /// `MmBackward0` has used them.
    #[test]
    fn recomputation_reenters_the_forwards_autocast() {
        let m = mlp();
        let rt = &m.rt;
        let x = &m.x0 * 1.0;
        let w1 = m.w1.clone();
        let g = rt.randn(&[N, N], DType::BF16, Device::Cuda).unwrap();
        let mb = MB as i64;
        rt.record_memory_history(true);
        let y = rt
            .autocast(DType::BF16, || {
                let y = checkpoint(rt, &[&x], move |a: &[Tensor]| {
                    Ok(vec![a[0].linear(&w1, None)?])
                })?
                .remove(0);
                // weight copy (cached), input copy, y; the input copy dies
                assert_eq!(events(rt), vec![2 * mb, 2 * mb, 2 * mb, -2 * mb]);
                Ok(y)
            })
            .unwrap();
        assert_eq!(
            events(rt),
            vec![-2 * mb],
            "the weight copy dies at the exit"
        );
        y.backward_with(Some(g), BackwardOptions::default())
            .unwrap();
        let ws = rt.profile().cublas_workspace as i64;
        assert_eq!(
            events(rt),
            vec![
                // recomputation: weight copy, input copy, stop before the output
                2 * mb,
                2 * mb,
                // MmBackward0: grad of the input copy (then the autograd
                // thread's cuBLAS workspace), grad of the weight copy; its
                // unpacked copies die when it returns
                2 * mb,
                ws,
                2 * mb,
                -2 * mb,
                -2 * mb,
                // ToCopyBackward0 of the input (fp32 grad), its bf16 input
                4 * mb,
                -2 * mb,
                // ToCopyBackward0 of the weight (fp32 grad, becomes .grad)
                4 * mb,
                -2 * mb,
                // MulBackward0 (x0 * 1)
                4 * mb,
                -4 * mb,
                // the caller's gradient
                -2 * mb,
            ]
        );
        assert_eq!(m.w1.grad().unwrap().dtype(), DType::F32);
        assert_eq!(rt.autocast_cached_casts(), 0);
    }
}
