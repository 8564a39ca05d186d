//! The predicted run as a PyTorch memory snapshot: what
//! `torch.cuda.memory._record_memory_history()` followed by
//! `_dump_snapshot()` at the end of the workload would hold (on an
//! out-of-memory: what an out-of-memory observer dumping the snapshot would
//! hold), built from an estimate recorded with
//! [`EstimateOptions::record_trace`](crate::EstimateOptions::record_trace).
//!
//! The segments, blocks and trace entries (actions, addresses, sizes, order)
//! are the allocator twin's. The stacks are made up from what the twin knows
//! of each allocation, innermost frame first:
//! - the allocator's C++ frame and the ATen op (`at::_ops::mm::call`);
//! - `vramscope::category::<name>`, the role the eager twin gave it
//!   (`vramscope inspect` reads it; other viewers show it as a frame);
//! - the module path as a Python `forward` frame in a file named after it
//!   (`model.layers.0.mlp.down_proj.py`);
//! - frames of the phase as PyTorch would have them (`Module._apply` while
//!   loading, `Tensor.backward`, `torch/optim/adamw.py` `step`, ...);
//! - the phase itself (`workload.py:1 in forward0`).
//!
//! Times are not predicted: `time_us` counts trace entries. The
//! `Optimizer.step#<Name>.step` annotations PyTorch records around each
//! optimizer step are written at the step phases' boundaries.

use std::collections::{HashMap, HashSet};

use vramscope_alloc::{AllocatorConfig, TraceAction};
use vramscope_engine::{AllocRecord, Category, MemEvent};
use vramscope_snapshot::{
    AllocatorSettings, Annotation, Segment, Snapshot, StackId, Trace, TraceEntry,
};

use crate::estimate::Estimate;
use crate::workload::{Mode, Workload};

const TORCH: &str = "/usr/local/lib/python3.12/site-packages/torch/";

/// What a phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PhaseKind {
    Load,
    Forward,
    Backward,
    Step,
    ZeroGrad,
}

impl PhaseKind {
    fn of(name: &str) -> PhaseKind {
        if name == "load" {
            PhaseKind::Load
        } else if name.starts_with("backward") {
            PhaseKind::Backward
        } else if name.starts_with("step") {
            PhaseKind::Step
        } else if name.starts_with("zero_grad") {
            PhaseKind::ZeroGrad
        } else {
            PhaseKind::Forward
        }
    }
}

/// The optimizer's Python file and class name.
fn optimizer_names(w: &Workload) -> (&'static str, &'static str) {
    (w.optimizer.source_file(), w.optimizer.class_name())
}

/// A stack, innermost frame first: (name, filename, line).
type RawStack = Vec<(String, String, i64)>;

fn torch_file(rel: &str) -> String {
    format!("{TORCH}{rel}")
}

/// The made-up stack of an allocation (`op` is `Some`) or a free.
fn build_stack(
    phase: &str,
    op: Option<(&str, Category, &str, bool)>,
    optimizer: (&str, &str),
) -> RawStack {
    let kind = PhaseKind::of(phase);
    let mut f: RawStack = Vec::new();
    let cpp = |f: &mut RawStack, name: String, file: &str| f.push((name, file.to_owned(), 0));
    match op {
        Some((op, category, module, cublas)) => {
            cpp(
                &mut f,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc".into(),
                "CUDACachingAllocator.cpp",
            );
            if cublas {
                // the workspace a cuBLAS handle keeps (CublasHandlePool.cpp)
                cpp(
                    &mut f,
                    "at::cuda::getCurrentCUDABlasHandle()".into(),
                    "CublasHandlePool.cpp",
                );
            }
            cpp(&mut f, format!("at::_ops::{op}::call"), "??");
            cpp(
                &mut f,
                format!("vramscope::category::{category}"),
                "vramscope",
            );
            if !module.is_empty() {
                f.push(("forward".into(), format!("{module}.py"), 1));
            }
        }
        None => cpp(
            &mut f,
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free".into(),
            "CUDACachingAllocator.cpp",
        ),
    }
    match kind {
        PhaseKind::Load => {
            if matches!(op, Some((_, Category::Parameter | Category::Buffer, _, _))) {
                f.push(("_apply".into(), torch_file("nn/modules/module.py"), 0));
                f.push(("cuda".into(), torch_file("nn/modules/module.py"), 0));
            }
        }
        PhaseKind::Forward => {}
        PhaseKind::Backward => {
            cpp(
                &mut f,
                "torch::autograd::Engine::evaluate_function".into(),
                "engine.cpp",
            );
            f.push(("backward".into(), torch_file("_tensor.py"), 0));
        }
        PhaseKind::Step => f.push(("step".into(), torch_file(optimizer.0), 0)),
        PhaseKind::ZeroGrad => f.push(("zero_grad".into(), torch_file("optim/optimizer.py"), 0)),
    }
    f.push((phase.to_owned(), "workload.py".into(), 1));
    f
}

/// The snapshot of `est`'s predicted run, or `None` when `est` was not
/// recorded with [`EstimateOptions::record_trace`](crate::EstimateOptions).
/// `conf` is the `PYTORCH_CUDA_ALLOC_CONF` text `cfg` was parsed from.
pub fn predicted_snapshot(
    est: &Estimate,
    w: &Workload,
    conf: &str,
    cfg: &AllocatorConfig,
) -> Option<Snapshot> {
    let rec = est.recorded.as_ref()?;
    let optimizer = optimizer_names(w);
    let mut snap = Snapshot::default();
    let na = snap.stacks.intern_str("N/A");
    let empty = snap.stacks.intern_str("");

    // The engine's allocations, in the order the allocator served them, with
    // the role each ended with (a gradient is often an op's output that
    // `AccumulateGrad` kept; an output becomes saved for backward).
    let mut roles: Vec<(&AllocRecord, Category)> = Vec::new();
    let mut by_addr: HashMap<u64, usize> = HashMap::new();
    for e in &est.events.events {
        match e {
            MemEvent::Alloc(r) => {
                by_addr.insert(r.addr, roles.len());
                roles.push((r, r.category));
            }
            MemEvent::Free(a) => {
                by_addr.remove(a);
            }
            MemEvent::Recategorize(a, c) => {
                if let Some(&i) = by_addr.get(a) {
                    roles[i].1 = *c;
                }
            }
        }
    }
    let mut allocs = roles.into_iter();
    // Addresses whose allocation is never freed inside the trace: of the
    // workspaces, only cuBLAS handles keep theirs.
    let mut freed: HashSet<usize> = HashSet::new();
    let mut alloc_at: HashMap<u64, usize> = HashMap::new();
    for (i, e) in rec.trace.iter().enumerate() {
        match e.action {
            TraceAction::Alloc => {
                alloc_at.insert(e.addr, i);
            }
            TraceAction::FreeRequested => {
                if let Some(at) = alloc_at.remove(&e.addr) {
                    freed.insert(at);
                }
            }
            _ => {}
        }
    }

    let mut cache: HashMap<RawStack, StackId> = HashMap::new();
    let mut intern = |snap: &mut Snapshot, s: RawStack| -> StackId {
        if let Some(&id) = cache.get(&s) {
            return id;
        }
        let ids: Vec<_> = s
            .iter()
            .map(|(n, f, l)| snap.stacks.intern_frame(n, f, *l))
            .collect();
        let id = snap.stacks.intern_stack(&ids);
        cache.insert(s, id);
        id
    };

    let mut live: HashMap<u64, StackId> = HashMap::new();
    let mut seg_stack: HashMap<u64, StackId> = HashMap::new();
    let mut trace = Trace::with_capacity(rec.trace.len());
    let mut annotations = Vec::new();
    let time = |i: usize| 2 * i as i64 + 2;
    let mut phase_ix = 0usize;
    let mut pending: Vec<TraceEntry> = Vec::new();
    for (i, e) in rec.trace.iter().enumerate() {
        while phase_ix + 1 < rec.phases.len() && rec.phases[phase_ix + 1].start <= i {
            phase_ix += 1;
        }
        let phase = rec.phases.get(phase_ix).map_or("load", |p| p.name.as_str());
        let stack = match e.action {
            TraceAction::Alloc => {
                let r = allocs.next();
                let s = match r {
                    Some((r, category)) if r.addr == e.addr => {
                        let cublas = category == Category::Workspace && !freed.contains(&i);
                        build_stack(phase, Some((r.op, category, &*r.module, cublas)), optimizer)
                    }
                    _ => build_stack(phase, None, optimizer),
                };
                let id = intern(&mut snap, s);
                live.insert(e.addr, id);
                id
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted => {
                intern(&mut snap, build_stack(phase, None, optimizer))
            }
            TraceAction::Oom => {
                let s = match &est.oom {
                    Some(o) => build_stack(
                        phase,
                        Some((o.op.as_str(), Category::Temporary, o.module.as_str(), false)),
                        optimizer,
                    ),
                    None => build_stack(phase, None, optimizer),
                };
                intern(&mut snap, s)
            }
            _ => StackId::EMPTY,
        };
        let oom = e.action == TraceAction::Oom;
        let entry = TraceEntry {
            action: Some(e.action),
            other_action: None,
            // an `oom` entry's address field holds the device's free bytes
            addr: if oom { 0 } else { e.addr },
            size: e.size,
            stream: e.stream,
            time_us: Some(time(i)),
            device_free: oom.then_some(e.addr),
            frames: stack,
            compile_context: Some(na),
            user_metadata: Some(empty),
        };
        match e.action {
            // a segment is created for the allocation that follows it
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => pending.push(entry),
            TraceAction::Alloc => {
                for mut p in pending.drain(..) {
                    p.frames = stack;
                    seg_stack.entry(p.addr).or_insert(stack);
                    trace.push(p);
                }
                trace.push(entry);
            }
            _ => {
                for p in pending.drain(..) {
                    trace.push(p);
                }
                trace.push(entry);
            }
        }
    }
    for p in pending.drain(..) {
        trace.push(p);
    }
    if w.mode == Mode::Train {
        for crate::PhaseSpan { name, start, end } in &rec.phases {
            if PhaseKind::of(name) == PhaseKind::Step {
                for (stage, at) in [("START", *start), ("END", *end)] {
                    annotations.push(Annotation {
                        stage: stage.into(),
                        name: format!("Optimizer.step#{}.step", optimizer.1),
                        device: 0,
                        time_us: 2 * at as i64 + 1,
                        other: Vec::new(),
                    });
                }
            }
        }
    }
    snap.segments = rec
        .segments
        .iter()
        .map(|s| {
            let frames = seg_stack.get(&s.address).copied().unwrap_or_default();
            Segment::of_twin(s, 0, frames, |a| live.get(&a).copied().unwrap_or_default())
        })
        .collect();
    snap.device_traces.push(trace);
    snap.external_annotations = annotations;
    snap.allocator_settings = Some(AllocatorSettings::from_config(conf, cfg));
    Some(snap)
}
