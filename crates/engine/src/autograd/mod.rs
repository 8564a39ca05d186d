//! The autograd graph: nodes with exactly the tensors each op saves for
//! backward (`tools/autograd/derivatives.yaml` and the generated
//! `torch/csrc/autograd/generated/Functions.h` of PyTorch 2.11), edges to the
//! nodes of the inputs, and `AccumulateGrad` for leaves.
//!
//! A saved tensor is a `SavedVariable` (`torch/csrc/autograd/saved_variable.cpp`):
//! without hooks it keeps the tensor (an output as its `tensor_data()`); under
//! `torch.autograd.graph.saved_tensors_hooks` ([`SavedTensorHooks`], the
//! mechanism of non-reentrant activation checkpointing) it keeps only what
//! the pack hook returns, and backward gets the tensor back from the unpack
//! hook.

mod engine;
mod formulas;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

pub use engine::BackwardOptions;
pub use formulas::CustomBackward;
pub(crate) use formulas::{Backward, MatMeta};

use crate::dims::Dims;
use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::runtime::{Category, Runtime};
use crate::tensor::Tensor;

/// An edge to the `input_nr`-th gradient input of `node`.
#[derive(Clone)]
pub(crate) struct Edge {
    pub(crate) node: Rc<Node>,
    pub(crate) input_nr: u32,
}

/// What a node knows of each tensor it will receive a gradient for
/// (`InputMetadata`): `validate_outputs` reduces or casts gradients to it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputMeta {
    pub(crate) sizes: Dims,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
}

impl InputMeta {
    fn of(t: &Tensor) -> Self {
        InputMeta {
            sizes: t.dims(),
            dtype: t.dtype(),
            device: t.device(),
        }
    }
}

/// A node's [`InputMeta`]s, one per output of its forward: the common single
/// one is kept in the node (an allocation less, and a cache miss less when
/// the engine reads it).
pub(crate) enum InputMetas {
    One(InputMeta),
    Many(Box<[InputMeta]>),
}

impl std::ops::Deref for InputMetas {
    type Target = [InputMeta];
    fn deref(&self) -> &[InputMeta] {
        match self {
            InputMetas::One(m) => std::slice::from_ref(m),
            InputMetas::Many(v) => v,
        }
    }
}

/// What a pack hook returned: the object a `SavedVariable` keeps instead of
/// the tensor (a checkpoint `_Holder`, a detached tensor, ...).
pub type Packed = Rc<dyn Any>;

/// `torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook)`: while
/// such a pair is the innermost one set ([`Runtime::saved_tensors_hooks`]),
/// every tensor an autograd node saves is handed to `pack`, and the node
/// keeps only the result; backward calls `unpack` on it to get a tensor back.
pub trait SavedTensorHooks {
    /// `pack_hook(x)`, called with grad mode off when a node saves `x`
    /// (`SavedVariable::set_hooks_and_pack_data`).
    fn pack(&self, x: &Tensor) -> Packed;
    /// `unpack_hook(packed)`, called when backward unpacks the saved tensor.
    fn unpack(&self, packed: &Packed) -> Result<Tensor>;
}

/// What a `SavedVariable` holds.
enum SavedData {
    /// no hooks: the tensor itself (an output's `tensor_data()`)
    Tensor(Tensor),
    /// saved under hooks: the packed object and the hooks that unpack it.
    /// `grad_fn` is `save_metadata`'s strong reference to the grad_fn of a
    /// saved non-output (the node that made the tensor stays alive).
    Hooked {
        hooks: Rc<dyn SavedTensorHooks>,
        packed: Packed,
        _grad_fn: Option<Rc<Node>>,
    },
}

/// `SavedVariable`: a tensor kept for backward and the version it had.
pub(crate) struct SavedVar {
    data: SavedData,
    version: u32,
    /// a hooked variable's unpacked tensor while its node's `apply` runs (the
    /// generated `apply` unpacks every saved variable into a local at its
    /// top; the locals die when it returns)
    unpacked: Option<Tensor>,
}

impl SavedVar {
    /// `SavedVariable(t, is_output)`: through the innermost saved-tensor
    /// hooks if any are set, else keeping the tensor (an output as its
    /// `tensor_data()`, which shares the storage but not the `grad_fn`).
    pub(crate) fn new(t: &Tensor, is_output: bool) -> SavedVar {
        let version = t.version();
        let rt = t.rt().clone();
        if let Some(hooks) = rt.default_saved_hooks() {
            // set_hooks_and_pack_data: the pack hook runs under NoGradGuard
            let packed = rt.no_grad(|| hooks.pack(t));
            let grad_fn = if is_output { None } else { t.grad_fn() };
            return SavedVar {
                data: SavedData::Hooked {
                    hooks,
                    packed,
                    _grad_fn: grad_fn,
                },
                version,
                unpacked: None,
            };
        }
        t.set_category_if(Category::Output, Category::SavedForBackward);
        let data = if is_output {
            t.tensor_data()
        } else {
            t.clone()
        };
        SavedVar {
            data: SavedData::Tensor(data),
            version,
            unpacked: None,
        }
    }

    /// Bytes of storage the saved tensor keeps (a hooked variable: what its
    /// packed object holds, if it is a tensor).
    fn storage_nbytes(&self) -> u64 {
        match &self.data {
            SavedData::Tensor(t) => t.storage_nbytes(),
            SavedData::Hooked { packed, .. } => packed
                .downcast_ref::<Tensor>()
                .map_or(0, Tensor::storage_nbytes),
        }
    }

    /// `SavedVariable::unpack` outside a node (the version check applies
    /// only without hooks, as in PyTorch).
    pub(crate) fn unpack(&self, node: &'static str) -> Result<Tensor> {
        match &self.data {
            SavedData::Tensor(t) => {
                if t.version() != self.version {
                    return Err(EngineError::SavedTensorModified {
                        node,
                        saved: self.version,
                        now: t.version(),
                    });
                }
                Ok(t.clone())
            }
            SavedData::Hooked { hooks, packed, .. } => {
                if let Some(t) = &self.unpacked {
                    return Ok(t.clone());
                }
                let (hooks, packed) = (hooks.clone(), packed.clone());
                hooks.unpack(&packed)
            }
        }
    }
}

/// One autograd node (`torch::autograd::Node`).
pub struct Node {
    pub(crate) seq: u64,
    pub(crate) kind: Backward,
    /// in `release_variables()` order
    saved: RefCell<Vec<SavedVar>>,
    released: Cell<bool>,
    pub(crate) edges: Vec<Option<Edge>>,
    pub(crate) input_meta: InputMetas,
    /// the backward pass counting this node's dependencies (its nesting
    /// depth; 0: none) and how many gradients it still waits for there
    /// (`GraphTask::dependencies_`, kept in the node: no map to hash into
    /// for every edge)
    pub(crate) pass: Cell<u32>,
    pub(crate) deps: Cell<u32>,
    /// tensor pre-hooks (`tensor.register_hook` on an output of this node),
    /// run when the engine is about to call it (`call_tensor_pre_hooks`)
    pub(crate) pre_hooks: RefCell<Vec<GradHook>>,
}

/// A hook the backward engine calls (a tensor hook that passes the gradient
/// on unchanged, or a callback queued for the end of the backward pass).
pub type GradHook = Rc<dyn Fn() -> Result<()>>;

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{:?} seq={}>", self.kind, self.seq)
    }
}

impl Drop for Node {
    /// `deleteNode`: tear long chains down iteratively, not recursively.
    fn drop(&mut self) {
        let mut stack: Vec<Rc<Node>> = Vec::new();
        for e in std::mem::take(&mut self.edges).into_iter().flatten() {
            stack.push(e.node);
        }
        while let Some(mut n) = stack.pop() {
            // the last owner: take its edges in place (moving the node out
            // of its Rc copies it), then drop it at the end of the iteration
            if let Some(node) = Rc::get_mut(&mut n) {
                for e in std::mem::take(&mut node.edges).into_iter().flatten() {
                    stack.push(e.node);
                }
                continue;
            }
            // the last strong owner with weak references left
            if let Ok(mut node) = Rc::try_unwrap(n) {
                for e in std::mem::take(&mut node.edges).into_iter().flatten() {
                    stack.push(e.node);
                }
            }
        }
    }
}

impl Node {
    /// The class name PyTorch prints (`MulBackward0`, `AccumulateGrad`, ...).
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
    /// `sequence_nr()` (`u64::MAX` for `AccumulateGrad`).
    pub fn sequence_nr(&self) -> u64 {
        self.seq
    }
    /// Number of tensors this node saved (0 once released).
    pub fn num_saved(&self) -> usize {
        self.saved.borrow().len()
    }
    /// Bytes of storage the saved tensors view (not deduplicated).
    pub fn saved_bytes(&self) -> u64 {
        self.saved
            .borrow()
            .iter()
            .map(SavedVar::storage_nbytes)
            .sum()
    }
    /// The nodes this one sends gradients to.
    pub fn next_functions(&self) -> Vec<Option<Rc<Node>>> {
        self.edges
            .iter()
            .map(|e| e.as_ref().map(|e| e.node.clone()))
            .collect()
    }
    /// Whether output `i` of the backward is needed (`should_compute_output`).
    pub(crate) fn needs(&self, i: usize) -> bool {
        self.edges.get(i).is_some_and(|e| e.is_some())
    }
    /// Unpack saved variable `slot`, checking it was neither freed nor
    /// modified in place since it was saved.
    pub(crate) fn saved(&self, slot: usize) -> Result<Tensor> {
        if self.released.get() {
            return Err(EngineError::GraphFreed { node: self.name() });
        }
        // a hooked variable is unpacked outside the borrow: its unpack hook
        // may recompute a checkpointed region (which records other nodes)
        let hooked = {
            let s = self.saved.borrow();
            let v = s.get(slot).ok_or_else(|| EngineError::Unsupported {
                what: format!("{} has no saved tensor #{slot}", self.name()),
            })?;
            match &v.data {
                SavedData::Tensor(_) => return v.unpack(self.name()),
                SavedData::Hooked { .. } if v.unpacked.is_some() => {
                    return v.unpack(self.name());
                }
                SavedData::Hooked { hooks, packed, .. } => (hooks.clone(), packed.clone()),
            }
        };
        hooked.0.unpack(&hooked.1)
    }
    /// The top of the generated `apply`: `auto x = x_.unpack();` for every
    /// saved variable, in order. Only hooked variables do anything here:
    /// their unpack hooks run now (the first one of a checkpointed region
    /// recomputes it) and the tensors they return live until
    /// [`Node::end_apply`], as the locals of `apply` do.
    pub(crate) fn begin_apply(&self) -> Result<()> {
        if self.released.get() {
            return Err(EngineError::GraphFreed { node: self.name() });
        }
        let n = self.saved.borrow().len();
        for slot in 0..n {
            let hooked = {
                let s = self.saved.borrow();
                match &s[slot].data {
                    SavedData::Hooked { hooks, packed, .. } if s[slot].unpacked.is_none() => {
                        Some((hooks.clone(), packed.clone()))
                    }
                    _ => None,
                }
            };
            if let Some((hooks, packed)) = hooked {
                let t = hooks.unpack(&packed)?;
                self.saved.borrow_mut()[slot].unpacked = Some(t);
            }
        }
        Ok(())
    }
    /// `apply` returns: its unpacked locals die (in reverse order).
    pub(crate) fn end_apply(&self) {
        let held: Vec<Tensor> = self
            .saved
            .borrow_mut()
            .iter_mut()
            .rev()
            .filter_map(|v| v.unpacked.take())
            .collect();
        drop(held);
    }
    /// `release_variables()`: every `SavedVariable::reset_data()` (the
    /// tensor, or the packed object and the hooks that hold its frame).
    pub(crate) fn release_variables(&self) {
        self.released.set(true);
        let v = std::mem::take(&mut *self.saved.borrow_mut());
        drop(v);
    }
}

/// The gradient edge of `t` (`impl::gradient_edge`): its `grad_fn`, or the
/// `AccumulateGrad` of a leaf that requires grad (created once and cached
/// weakly, as `grad_accumulator()`).
pub(crate) fn gradient_edge(t: &Tensor) -> Option<Edge> {
    let m = t.meta();
    if let Some(f) = &m.grad_fn {
        return Some(Edge {
            node: f.clone(),
            input_nr: m.output_nr,
        });
    }
    if !m.requires_grad {
        return None;
    }
    if let Some(acc) = m.grad_acc.upgrade() {
        return Some(Edge {
            node: acc,
            input_nr: 0,
        });
    }
    drop(m);
    let node = Rc::new(Node {
        seq: u64::MAX,
        kind: Backward::AccumulateGrad {
            variable: t.clone(),
        },
        saved: RefCell::new(Vec::new()),
        released: Cell::new(false),
        edges: Vec::new(),
        pass: Cell::new(0),
        deps: Cell::new(0),
        pre_hooks: RefCell::new(Vec::new()),
        input_meta: InputMetas::One(InputMeta::of(t)),
    });
    t.0.autograd.borrow_mut().grad_acc = Rc::downgrade(&node);
    Some(Edge { node, input_nr: 0 })
}

/// A node being built by a forward op (`grad_fn` created before the kernel
/// runs, so its sequence number precedes those of the ops inside).
pub(crate) struct Pending {
    seq: u64,
    edges: Vec<Option<Edge>>,
    saved: Vec<SavedVar>,
}

impl Pending {
    /// `compute_requires_grad(inputs)` under grad mode: a pending node with
    /// the inputs' edges, or `None` when no gradient is needed.
    pub(crate) fn begin(rt: &Runtime, inputs: &[Option<&Tensor>]) -> Option<Pending> {
        if !rt.is_grad_enabled() {
            return None;
        }
        if !inputs.iter().any(|t| t.is_some_and(|t| t.requires_grad())) {
            return None;
        }
        let edges = inputs.iter().map(|t| t.and_then(gradient_edge)).collect();
        Some(Pending {
            seq: rt.next_seq(),
            edges,
            saved: Vec::new(),
        })
    }
    /// `should_compute_output(i)`.
    pub(crate) fn needs(&self, i: usize) -> bool {
        self.edges.get(i).is_some_and(|e| e.is_some())
    }
    /// `SavedVariable(t, is_output=false)`: keeps the same tensor (or what
    /// the saved-tensor hooks pack).
    pub(crate) fn save(&mut self, t: &Tensor) -> usize {
        self.saved.push(SavedVar::new(t, false));
        self.saved.len() - 1
    }
    /// `SavedVariable(t, is_output=true)`: keeps `tensor_data()`, which
    /// shares the storage but not the `grad_fn` (no reference cycle), or
    /// what the saved-tensor hooks pack.
    pub(crate) fn save_output(&mut self, t: &Tensor) -> usize {
        self.saved.push(SavedVar::new(t, true));
        self.saved.len() - 1
    }
    /// Finish: wire `outputs` (differentiable ones) to the node.
    pub(crate) fn finish(self, kind: Backward, outputs: &[&Tensor]) -> Rc<Node> {
        let input_meta = match outputs {
            [t] => InputMetas::One(InputMeta::of(t)),
            _ => InputMetas::Many(outputs.iter().map(|t| InputMeta::of(t)).collect()),
        };
        let node = Rc::new(Node {
            seq: self.seq,
            kind,
            saved: RefCell::new(self.saved),
            released: Cell::new(false),
            edges: self.edges,
            input_meta,
            pass: Cell::new(0),
            deps: Cell::new(0),
            pre_hooks: RefCell::new(Vec::new()),
        });
        for (i, t) in outputs.iter().enumerate() {
            let mut m = t.0.autograd.borrow_mut();
            m.grad_fn = Some(node.clone());
            m.output_nr = i as u32;
        }
        node
    }
    /// Finish with saved outputs: `save_outputs` runs after the node exists
    /// (outputs are saved after `set_history`, as the generated code does).
    pub(crate) fn finish_saving(
        mut self,
        kind: impl FnOnce(&mut Pending) -> Backward,
        outputs: &[&Tensor],
    ) -> Rc<Node> {
        let k = kind(&mut self);
        self.finish(k, outputs)
    }
}

/// A pack hook's exception, in flight (`SavedVariable`'s constructor cannot
/// fail in the twin, so the exception is parked here and raised by the
/// next allocation, which is where the op it interrupted would have gone on).
#[derive(Debug, Clone)]
pub(crate) enum Raised {
    /// `_StopRecomputationError` (checkpoint's early stop)
    StopRecomputation,
    /// any other error
    Error(EngineError),
}

/// Saved-tensor hooks of a process: the `saved_tensors_hooks` stack
/// (`at::SavedTensorDefaultHooks`, thread-local in PyTorch and carried to the
/// autograd thread by `ThreadLocalState`; the twin runs one thread at a
/// time), a pack hook's exception in flight, and the current graph task.
#[derive(Default)]
pub(crate) struct HooksState {
    stack: Vec<Rc<dyn SavedTensorHooks>>,
    raised: Option<Raised>,
    graph_task: Option<u64>,
    /// backward passes running (nested in one another)
    depth: u32,
    next_id: u64,
    /// `Variable._execution_engine.queue_callback`: run when the backward
    /// pass ends
    pub(crate) final_callbacks: Vec<GradHook>,
}

impl HooksState {
    /// The error every allocation fails with while a pack hook's exception
    /// is in flight.
    pub(crate) fn raised_error(&self) -> Option<EngineError> {
        match &self.raised {
            None => None,
            Some(Raised::StopRecomputation) => Some(EngineError::Unsupported {
                what: "torch.utils.checkpoint: _StopRecomputationError escaped its recomputation"
                    .into(),
            }),
            Some(Raised::Error(e)) => Some(e.clone()),
        }
    }
}

impl Runtime {
    /// Run `f` under `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`:
    /// every tensor a node saves meanwhile goes through `hooks`.
    pub fn saved_tensors_hooks<T>(
        &self,
        hooks: Rc<dyn SavedTensorHooks>,
        f: impl FnOnce() -> T,
    ) -> T {
        self.st.borrow_mut().saved_hooks.stack.push(hooks);
        let out = f();
        let popped = self.st.borrow_mut().saved_hooks.stack.pop();
        drop(popped);
        out
    }
    /// `get_default_hooks()`: the innermost saved-tensor hooks, if any.
    pub(crate) fn default_saved_hooks(&self) -> Option<Rc<dyn SavedTensorHooks>> {
        self.st.borrow().saved_hooks.stack.last().cloned()
    }
    /// A pack hook raises `r`.
    pub(crate) fn raise_from_hook(&self, r: Raised) {
        let mut st = self.st.borrow_mut();
        if st.saved_hooks.raised.is_none() {
            st.saved_hooks.raised = Some(r);
        }
    }
    /// Whether a pack hook's exception is in flight.
    pub(crate) fn hook_raised(&self) -> bool {
        self.st.borrow().saved_hooks.raised.is_some()
    }
    /// Catch the pack hook's exception in flight, if any.
    pub(crate) fn take_raised(&self) -> Option<Raised> {
        self.st.borrow_mut().saved_hooks.raised.take()
    }
    /// `torch._C._current_graph_task_id()`, or (outside backward) a fresh id,
    /// as checkpoint's unpack hook draws a `uuid4`.
    pub(crate) fn current_graph_task_id(&self) -> u64 {
        let mut st = self.st.borrow_mut();
        if let Some(g) = st.saved_hooks.graph_task {
            return g;
        }
        st.saved_hooks.next_id += 1;
        st.saved_hooks.next_id
    }
    /// A backward call starts a graph task; returns the previous one and
    /// the new task's nesting depth (1 for the outermost).
    pub(crate) fn enter_graph_task(&self) -> (Option<u64>, u32) {
        let mut st = self.st.borrow_mut();
        st.saved_hooks.next_id += 1;
        st.saved_hooks.depth += 1;
        let id = st.saved_hooks.next_id;
        (st.saved_hooks.graph_task.replace(id), st.saved_hooks.depth)
    }
    /// The graph task ends.
    pub(crate) fn exit_graph_task(&self, prev: Option<u64>) {
        let mut st = self.st.borrow_mut();
        st.saved_hooks.graph_task = prev;
        st.saved_hooks.depth -= 1;
    }
}

impl Tensor {
    pub(crate) fn set_category_if(&self, from: Category, to: Category) {
        if let Some(slot) = self.0.storage.live_slot() {
            self.runtime().set_category_if(slot, from, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{BackwardOptions, DType, Device, EngineError, Runtime, Tensor};

    const MB: i64 = 1 << 20;

    fn leaf(rt: &Runtime, grad: bool) -> Tensor {
        let t = rt.randn(&[MB / 4], DType::F32, Device::Cuda).unwrap();
        t.requires_grad_(grad).unwrap();
        t
    }

    #[test]
    fn mul_saves_the_other_operand_only_when_needed() {
        let rt = Runtime::default();
        let (x, y) = (leaf(&rt, true), leaf(&rt, false));
        let z = &x * &y;
        let n = z.grad_fn().unwrap();
        assert_eq!(n.name(), "MulBackward0");
        assert_eq!(
            n.num_saved(),
            1,
            "only `other` (y), since y does not require grad"
        );
        let y2 = leaf(&rt, true);
        let z2 = &x * &y2;
        assert_eq!(z2.grad_fn().unwrap().num_saved(), 2);
        drop((z, z2));
    }

    #[test]
    fn temporaries_die_unless_saved() {
        let rt = Runtime::default();
        let (x, y) = (leaf(&rt, true), leaf(&rt, false));
        let base = rt.memory_allocated();
        // x+1 is not saved (y does not require grad); 2*y is saved by MulBackward0
        let z = (&x + 1.0) * (2.0 * &y);
        assert_eq!(rt.memory_allocated() - base, 2 * MB);
        assert_eq!(rt.max_memory_allocated() - base, 3 * MB);
        drop(z);
        assert_eq!(
            rt.memory_allocated(),
            base,
            "dropping z frees its graph and the saved 2*y"
        );
    }

    #[test]
    fn add_scalar_mul_sum_and_mean_save_no_tensor() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        for t in [
            &x + 1.0,
            &x * 3.0,
            x.sum().unwrap(),
            x.mean().unwrap(),
            &x + &x,
        ] {
            assert_eq!(t.grad_fn().unwrap().num_saved(), 0, "{:?}", t.grad_fn());
        }
    }

    #[test]
    fn unary_ops_save_what_derivatives_yaml_says() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        for (t, saves_result) in [
            (x.exp().unwrap(), true),
            (x.sigmoid().unwrap(), true),
            (x.relu().unwrap(), true),
            (x.tanh().unwrap(), true),
            (x.gelu().unwrap(), false),
            (x.silu().unwrap(), false),
        ] {
            let n = t.grad_fn().unwrap();
            assert_eq!(n.num_saved(), 1);
            let saved = n.saved(0).unwrap();
            assert_eq!(saved.shares_storage(&t), saves_result, "{}", n.name());
            assert_eq!(saved.shares_storage(&x), !saves_result, "{}", n.name());
        }
    }

    #[test]
    fn mm_saves_conditionally() {
        let rt = Runtime::default();
        let a = rt.randn(&[8, 8], DType::F32, Device::Cuda).unwrap();
        let w = rt.randn(&[8, 8], DType::F32, Device::Cuda).unwrap();
        w.requires_grad_(true).unwrap();
        let y = a.mm(&w).unwrap();
        // only mat2 requires grad: self (a) is saved, mat2 is not
        let n = y.grad_fn().unwrap();
        assert_eq!(n.num_saved(), 1);
        assert!(n.saved(0).unwrap().same(&a));
    }

    #[test]
    fn views_share_storage_and_reshape_copies_only_when_it_must() {
        let rt = Runtime::default();
        let x = rt.randn(&[4, 8], DType::F32, Device::Cuda).unwrap();
        let before = rt.memory_allocated();
        let v = x.view(&[8, 4]).unwrap();
        let t = x.t();
        let d = x.detach();
        assert!(v.shares_storage(&x) && t.shares_storage(&x) && d.shares_storage(&x));
        assert_eq!(rt.memory_allocated(), before);
        let r = t.reshape(&[32]).unwrap();
        assert!(
            !r.shares_storage(&x),
            "a transposed tensor cannot be flattened without a copy"
        );
        assert!(t.view(&[32]).is_err());
        // `del x` while a view is alive keeps the storage
        drop((x, v, t, r));
        assert_eq!(rt.memory_allocated(), before);
        drop(d);
        assert_eq!(rt.memory_allocated(), 0);
    }

    #[test]
    fn no_grad_records_nothing() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        let y = rt.no_grad(|| x.exp().unwrap());
        assert!(y.grad_fn().is_none() && !y.requires_grad());
    }

    #[test]
    fn in_place_modification_of_a_saved_tensor_is_refused_at_backward() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        let e = x.exp().unwrap();
        let s = e.sum().unwrap();
        rt.no_grad(|| e.scalar_("mul_").unwrap());
        assert!(matches!(
            s.backward(),
            Err(EngineError::SavedTensorModified { .. })
        ));
    }

    #[test]
    fn second_backward_needs_retain_graph() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        let y = x.exp().unwrap();
        let s = y.sum().unwrap();
        s.backward_with(None, BackwardOptions { retain_graph: true })
            .unwrap();
        let g1 = x.grad().unwrap();
        s.backward().unwrap();
        // the second gradient is accumulated in place into the same .grad
        assert!(x.grad().unwrap().shares_storage(&g1));
        assert!(matches!(s.backward(), Err(EngineError::GraphFreed { .. })));
    }

    #[test]
    fn accumulate_grad_steals_the_incoming_gradient() {
        let rt = Runtime::default();
        let x = leaf(&rt, true);
        let base = rt.memory_allocated();
        let y = &x * 2.0;
        let s = y.sum().unwrap();
        drop(y);
        s.backward().unwrap();
        drop(s);
        // the 1 MiB of MulBackward0's output became x.grad, nothing else stays
        assert_eq!(rt.memory_allocated() - base, MB);
        assert!(x.grad().is_some());
    }

    #[test]
    fn backward_allocates_its_own_cublas_workspace() {
        let rt = Runtime::default();
        let a = rt.randn(&[16, 16], DType::F32, Device::Cuda).unwrap();
        a.requires_grad_(true).unwrap();
        let y = a.mm(&a).unwrap();
        let ws = rt.profile().cublas_workspace as i64;
        let after_fwd = rt.memory_allocated();
        assert!(after_fwd >= ws);
        let s = y.sum().unwrap();
        s.backward().unwrap();
        assert!(
            rt.memory_allocated() >= after_fwd + ws,
            "second workspace for the autograd thread"
        );
    }
}
