//! The backward engine (`torch/csrc/autograd/engine.cpp`): dependency
//! counting, a ready queue ordered by sequence number (highest first, as
//! `CompareNodeTaskTime` orders `std::priority_queue`), input buffers that
//! steal the first gradient and accumulate the rest (`InputBuffer::add`),
//! `validate_outputs` (reducing broadcast gradients with `sum_to`),
//! `release_variables` after each node unless `retain_graph`, and
//! `AccumulateGrad`'s steal-or-clone rules. It runs on the CUDA device
//! thread, whose cuBLAS handle is not the Python thread's.

use crate::fastmap::FastMap;
use std::rc::Rc;

use crate::autograd::{Backward, Edge, Node};
use crate::error::{EngineError, Result};
use crate::runtime::{Category, Thread};
use crate::tensor::Tensor;

/// Options of `tensor.backward()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackwardOptions {
    /// `retain_graph=True`: keep every node's saved tensors.
    pub retain_graph: bool,
}

/// A `std::priority_queue<NodeTask>` replica: libstdc++'s `push_heap` /
/// `pop_heap` on a vector, so ties between equal sequence numbers (every
/// `AccumulateGrad` has `UINT64_MAX`) break as PyTorch breaks them.
struct ReadyQueue {
    v: Vec<(u64, Rc<Node>, InputBuffer)>,
}

/// A node's `InputBuffer`: one slot per gradient it takes, the common single
/// one held inline (no heap allocation per node).
enum InputBuffer {
    One(Option<Tensor>),
    Many(Vec<Option<Tensor>>),
}

impl InputBuffer {
    /// The buffer of `node` (at least one slot, as `InputBuffer(num_inputs)`
    /// is indexed by `input_nr`).
    fn of(node: &Node) -> Self {
        match node.input_meta.len() {
            0 | 1 => InputBuffer::One(None),
            n => InputBuffer::Many(vec![None; n]),
        }
    }
    fn slots(&mut self) -> &mut [Option<Tensor>] {
        match self {
            InputBuffer::One(t) => std::slice::from_mut(t),
            InputBuffer::Many(v) => v,
        }
    }
}

/// The nodes one backward pass counts dependencies on
/// (`compute_dependencies`). The counts live in the nodes ([`Node::deps`]),
/// stamped with the pass's nesting depth; each node's previous stamp and
/// count are kept and put back when the pass ends, however it ends, so a
/// backward run inside another (a custom function's backward) leaves the
/// outer pass's counts as they were, and every pass starts from clean nodes.
struct Dependencies {
    pass: u32,
    nodes: Vec<(Rc<Node>, u32, u32)>,
}

impl Dependencies {
    fn count(root: &Rc<Node>, pass: u32) -> Self {
        let mut d = Dependencies {
            pass,
            nodes: Vec::new(),
        };
        d.visit(root);
        let mut i = 0;
        while i < d.nodes.len() {
            let n = d.nodes[i].0.clone();
            i += 1;
            for e in n.edges.iter().flatten() {
                d.visit(&e.node);
                e.node.deps.set(e.node.deps.get() + 1);
            }
        }
        d
    }
    fn visit(&mut self, n: &Rc<Node>) {
        if n.pass.get() != self.pass {
            self.nodes.push((n.clone(), n.pass.get(), n.deps.get()));
            n.pass.set(self.pass);
            n.deps.set(0);
        }
    }
}

impl Drop for Dependencies {
    fn drop(&mut self) {
        for (n, pass, deps) in self.nodes.drain(..) {
            n.pass.set(pass);
            n.deps.set(deps);
        }
    }
}

impl ReadyQueue {
    fn less(&self, a: usize, b: usize) -> bool {
        self.v[a].0 < self.v[b].0
    }
    fn push(&mut self, item: (u64, Rc<Node>, InputBuffer)) {
        self.v.push(item);
        // __push_heap: sift up
        let mut hole = self.v.len() - 1;
        while hole > 0 {
            let parent = (hole - 1) / 2;
            if self.less(parent, hole) {
                self.v.swap(parent, hole);
                hole = parent;
            } else {
                break;
            }
        }
    }
    fn pop(&mut self) -> Option<(u64, Rc<Node>, InputBuffer)> {
        let n = self.v.len();
        if n == 0 {
            return None;
        }
        // __pop_heap: move last into the root's hole via __adjust_heap
        self.v.swap(0, n - 1);
        let top = self.v.pop();
        let len = self.v.len();
        if len > 1 {
            // __adjust_heap(first, 0, len, value): sift the hole down to a leaf
            // choosing the larger child (right preferred unless left is
            // greater), then __push_heap the value back up.
            let mut hole = 0usize;
            let mut child = 0usize;
            while child < (len - 1) / 2 {
                child = 2 * (child + 1);
                if self.less(child, child - 1) {
                    child -= 1;
                }
                self.v.swap(hole, child);
                hole = child;
            }
            if len.is_multiple_of(2) && child == (len - 2) / 2 {
                child = 2 * (child + 1);
                self.v.swap(hole, child - 1);
                hole = child - 1;
            }
            while hole > 0 {
                let parent = (hole - 1) / 2;
                if self.less(parent, hole) {
                    self.v.swap(parent, hole);
                    hole = parent;
                } else {
                    break;
                }
            }
        }
        top
    }
}

/// `can_accumulate_inplace`: dense, and this buffer holds the only
/// reference to the tensor and to its storage. A view never qualifies: its
/// `DifferentiableViewMeta` keeps its base (which holds the storage too), so
/// `storage().use_count()` is at least 2 — the gradient of a `reshape`d
/// input (`ViewBackward0`'s output) is accumulated out of place (the
/// `vit_train_bf16_ckpt_sgdm` trace: the q/k/v input gradients allocate
/// their sum, then free both).
fn can_accumulate_inplace(t: &Tensor) -> bool {
    t.is_non_overlapping_and_dense()
        && !t.is_view()
        && t.use_count() == 1
        && t.storage_use_count() == 1
}

/// `InputBuffer::add` with grad mode off (`accumulate`).
fn buffer_add(buf: &mut [Option<Tensor>], pos: usize, var: Tensor) -> Result<()> {
    match buf[pos].take() {
        None => buf[pos] = Some(var),
        Some(old) => {
            // input_buffer.cpp `accumulate` (2.x)
            // repurposes only `old_var` for dense gradients (the `var.add_`
            // branch is for a sparse `old_var`); enc_pre on the H100 shows the
            // out-of-place sum when only the incoming gradient is unshared.
            if can_accumulate_inplace(&old) {
                old.add_(&var, 1.0)?;
                buf[pos] = Some(old);
                drop(var);
            } else {
                let s = old.add(&var)?;
                drop(old);
                drop(var);
                buf[pos] = Some(s);
            }
        }
    }
    Ok(())
}

/// `utils::obeys_layout_contract(grad, variable)`.
fn obeys_layout_contract(grad: &Tensor, var: &Tensor) -> bool {
    if var.is_non_overlapping_and_dense() {
        for i in 0..grad.dim() {
            if grad.sizes()[i] != 1 {
                if grad.strides()[i] != var.strides()[i] {
                    return false;
                }
            } else if grad.strides()[i] == 0 {
                return false;
            }
        }
        true
    } else {
        grad.is_contiguous()
    }
}

/// `AccumulateGrad::apply` → `accumulateGrad` with grad mode off.
fn accumulate_grad(variable: &Tensor, new_grad: Tensor) -> Result<()> {
    match variable.grad() {
        None => {
            // steal when nobody else holds the gradient and its layout fits
            if new_grad.use_count() <= 1 && obeys_layout_contract(&new_grad, variable) {
                let g = new_grad.detach();
                drop(new_grad);
                variable.set_grad(Some(g));
            } else {
                // clone_obey_contract
                let rt = variable.rt().clone();
                let c = if variable.is_non_overlapping_and_dense() {
                    rt.empty_strided_op(
                        variable.sizes(),
                        variable.strides(),
                        variable.dtype(),
                        variable.device(),
                        "empty_strided",
                        Category::Gradient,
                    )?
                } else {
                    rt.empty_op(
                        variable.sizes(),
                        variable.dtype(),
                        variable.device(),
                        "clone",
                        Category::Gradient,
                    )?
                };
                drop(new_grad);
                variable.set_grad(Some(c));
            }
        }
        Some(g) => {
            // variable_grad += new_grad
            g.add_(&new_grad, 1.0)?;
            drop(new_grad);
        }
    }
    Ok(())
}

/// `validate_outputs`: reduce broadcast gradients to the input's shape
/// (`InputMetadata::reduce_grad` → `at::sum_to`) and cast dtype.
fn validate_outputs(node: &Node, outputs: &mut [Option<Tensor>]) -> Result<()> {
    for (i, g) in outputs.iter_mut().enumerate() {
        let Some(Some(edge)) = node.edges.get(i) else {
            continue;
        };
        let Some(t) = g.as_ref() else { continue };
        let meta = edge.node.input_meta[edge.input_nr as usize];
        // (element by element: a few entries, not worth a call to memcmp)
        let (a, b) = (t.sizes(), &*meta.sizes);
        if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x != y) {
            let r = t.sum_to(&meta.sizes)?;
            *g = Some(r);
        }
        let t = g.as_ref().expect("checked above");
        if t.device() != meta.device {
            let r = t.to_device(meta.device)?;
            *g = Some(r);
        }
        let t = g.as_ref().expect("checked above");
        if t.dtype() != meta.dtype {
            let r = t.to_dtype(meta.dtype)?;
            *g = Some(r);
        }
    }
    Ok(())
}

fn key(n: &Rc<Node>) -> *const Node {
    Rc::as_ptr(n)
}

impl Tensor {
    /// `tensor.register_hook(fn)` on a tensor with a `grad_fn`: `fn` runs
    /// when the engine is about to call that node (its gradient complete);
    /// the gradient passes on unchanged. A leaf has no node: refused.
    pub fn register_grad_hook(&self, hook: crate::autograd::GradHook) -> Result<()> {
        match &self.meta().grad_fn {
            Some(node) => {
                node.pre_hooks.borrow_mut().push(hook);
                Ok(())
            }
            None => Err(EngineError::Unsupported {
                what: "a gradient hook on a tensor without grad_fn".into(),
            }),
        }
    }

    /// `tensor.register_post_accumulate_grad_hook(fn)` on a leaf: `fn` runs
    /// each time its `AccumulateGrad` has run (its `.grad` updated).
    pub fn register_post_accumulate_grad_hook(&self, hook: crate::autograd::GradHook) {
        self.0.autograd.borrow_mut().post_accumulate.push(hook);
    }

    /// `tensor.backward()` on a scalar (the gradient is `torch.ones_like`).
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, BackwardOptions::default())
    }

    /// `tensor.backward(gradient, retain_graph=)`.
    pub fn backward_with(&self, gradient: Option<Tensor>, opts: BackwardOptions) -> Result<()> {
        let rt = self.rt().clone();
        // torch.autograd.__init__._make_grads: ones_like for a scalar root
        let grad = match gradient {
            Some(g) => g,
            None => {
                if self.numel() != 1 {
                    return Err(EngineError::NonScalarBackward { shape: self.dims() });
                }
                crate::ops::empty_like(self, self.dtype(), "ones_like", Category::Gradient)?
            }
        };
        let Some(root) = crate::autograd::gradient_edge(self) else {
            return Err(EngineError::NoGradFn);
        };
        let prev_grad_mode = rt.set_grad_enabled(false);
        // the device thread runs with the caller's thread-local state
        // (GraphTask::thread_locals_), autocast included, and its own
        // nesting counter; the graph task id is what checkpoint keys on
        let caller_autocast = rt.autocast_tls();
        let prev_autocast = rt.swap_autocast_tls(Thread::Autograd, caller_autocast);
        let (prev_task, depth) = rt.enter_graph_task();
        let r = rt.on_thread(Thread::Autograd, || {
            run(root, grad.clone(), opts, depth)?;
            // exec_post_processing: the callbacks queued during the pass
            let callbacks = std::mem::take(&mut rt.st.borrow_mut().saved_hooks.final_callbacks);
            for c in callbacks {
                c()?;
            }
            Ok(())
        });
        rt.exit_graph_task(prev_task);
        rt.swap_autocast_tls(Thread::Autograd, prev_autocast);
        rt.set_grad_enabled(prev_grad_mode);
        // the Python caller drops its grad_tensors after the engine returns
        drop(grad);
        r
    }
}

/// Run the graph from `root` (`Engine::execute` with one root edge: no
/// `GraphRoot`, the root node gets the gradient directly).
fn run(root: Edge, grad: Tensor, opts: BackwardOptions, pass: u32) -> Result<()> {
    let _deps = Dependencies::count(&root.node, pass);

    let mut not_ready: FastMap<*const Node, InputBuffer> = FastMap::default();
    let mut queue = ReadyQueue { v: Vec::new() };
    let mut buf = InputBuffer::of(&root.node);
    buffer_add(buf.slots(), root.input_nr as usize, grad)?;
    queue.push((root.node.seq, root.node.clone(), buf));
    drop(root);

    while let Some((_, node, mut inputs)) = queue.pop() {
        if let Backward::AccumulateGrad { variable } = &node.kind {
            // AccumulateGrad::apply: `new_grad = std::move(grads[0])`
            let g = inputs.slots()[0].take();
            drop(inputs);
            if let Some(g) = g {
                accumulate_grad(variable, g)?;
            }
            // the accumulator's post hooks (DDP's reducer registers one per
            // parameter: `grad_accumulator->add_post_hook`)
            let hooks = variable.meta().post_accumulate.clone();
            for h in hooks {
                h()?;
            }
            continue;
        }
        // call_tensor_pre_hooks (the gradient passed on unchanged)
        let hooks: Vec<_> = node.pre_hooks.borrow().clone();
        for h in hooks {
            h()?;
        }
        // call_function: the inputs live until it returns (after validate_outputs);
        // apply unpacks every saved variable first (a checkpointed region is
        // recomputed here) and its unpacked locals die when it returns
        node.begin_apply()?;
        let applied = node.apply(inputs.slots());
        node.end_apply();
        let mut outputs = applied?;
        validate_outputs(&node, &mut outputs)?;
        // retain_grad hooks are not modelled beyond keeping the tensor alive
        drop(inputs);
        if !opts.retain_graph {
            node.release_variables();
        }
        for (i, out) in outputs.iter_mut().enumerate() {
            let Some(Some(next)) = node.edges.get(i) else {
                continue;
            };
            let k = key(&next.node);
            debug_assert_eq!(next.node.pass.get(), pass, "dependency counted");
            let d = next
                .node
                .deps
                .get()
                .checked_sub(1)
                .expect("dependency counted");
            next.node.deps.set(d);
            let ready = d == 0;
            let var = out.take();
            match not_ready.remove(&k) {
                None => {
                    let mut b = InputBuffer::of(&next.node);
                    if let Some(v) = var {
                        buffer_add(b.slots(), next.input_nr as usize, v)?;
                    }
                    if ready {
                        queue.push((next.node.seq, next.node.clone(), b));
                    } else {
                        not_ready.insert(k, b);
                    }
                }
                Some(mut b) => {
                    if let Some(v) = var {
                        buffer_add(b.slots(), next.input_nr as usize, v)?;
                    }
                    if ready {
                        queue.push((next.node.seq, next.node.clone(), b));
                    } else {
                        not_ready.insert(k, b);
                    }
                }
            }
        }
        drop(outputs);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_pops_highest_first() {
        let rt = crate::Runtime::default();
        let _ = rt;
        let mk = |s: u64| {
            Rc::new(Node {
                seq: s,
                kind: Backward::Clone,
                saved: Default::default(),
                released: Default::default(),
                edges: vec![],
                input_meta: crate::autograd::InputMetas::Many(Box::new([])),
                pass: Default::default(),
                deps: Default::default(),
                pre_hooks: Default::default(),
            })
        };
        let mut q = ReadyQueue { v: vec![] };
        for s in [3, 9, 1, 7, 5] {
            q.push((s, mk(s), InputBuffer::One(None)));
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.pop().map(|x| x.0)).collect();
        assert_eq!(order, vec![9, 7, 5, 3, 1]);
    }
}

#[cfg(test)]
mod hook_tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use crate::{DType, Device, Runtime};

    #[test]
    fn a_tensor_hook_runs_before_its_node_and_a_queued_callback_after_the_pass() {
        let rt = Runtime::default();
        let x = rt.empty(&[1024], DType::F32, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let y = x.mul_scalar(2.0).unwrap();
        let z = y.sum().unwrap();
        let seen: Rc<RefCell<Vec<(&str, bool)>>> = Rc::default();
        let (s, xc, rc) = (seen.clone(), x.clone(), rt.clone());
        y.register_grad_hook(Rc::new(move || {
            s.borrow_mut().push(("hook", xc.grad().is_some()));
            let (s, xc) = (s.clone(), xc.clone());
            rc.queue_callback(Rc::new(move || {
                s.borrow_mut().push(("callback", xc.grad().is_some()));
                Ok(())
            }));
            Ok(())
        }))
        .unwrap();
        // a leaf has no node to hook
        assert!(x.register_grad_hook(Rc::new(|| Ok(()))).is_err());
        z.backward().unwrap();
        assert_eq!(*seen.borrow(), [("hook", false), ("callback", true)]);
    }
}
