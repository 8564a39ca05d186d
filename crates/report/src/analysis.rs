//! From a snapshot to a [`Report`]: peaks, what is live at the peak grouped
//! by allocation site, categories with their evidence, fragmentation and
//! out-of-memory events.

use std::collections::HashMap;

use vramscope_alloc::AllocatorConfig;
use vramscope_snapshot::{Frame, Snapshot, StackId, Trace};

use crate::schema::{
    Category, Fragmentation, LayoutJson, LiveAtPeak, Oom, Point, Report, Site, SiteCategory,
    Tensor, TraceRange,
};
use crate::timeline::{self, Allocation, Timeline};

/// What to put in a report.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many sites and tensors to list.
    pub top: usize,
    /// Include full stacks.
    pub stacks: bool,
    /// Which device's trace.
    pub device: usize,
    /// Most timeline points to keep.
    pub timeline_points: usize,
    /// Trace entries to report on (peaks, live at the peak, curve, OOMs);
    /// the whole trace when `None`.
    pub range: Option<std::ops::Range<usize>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            top: 10,
            stacks: false,
            device: 0,
            timeline_points: 1000,
            range: None,
        }
    }
}

/// What an allocation is, as far as its stack and timing tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Parameters and buffers (`Module._apply`, `.cuda()`, `.to()`).
    Parameters,
    /// Optimizer state (allocated in `Optimizer.step`, outlives it).
    OptimizerState,
    /// Temporaries of the optimizer step.
    OptimizerTemporary,
    /// Gradients (allocated in backward, alive into the optimizer step).
    Gradients,
    /// Temporaries of the backward pass.
    BackwardTemporary,
    /// Forward activations (allocated under a `forward`).
    Activations,
    /// The cuBLAS workspace.
    CublasWorkspace,
    /// No evidence.
    Other,
}

impl Kind {
    /// Stable name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Parameters => "parameters",
            Kind::OptimizerState => "optimizer_state",
            Kind::OptimizerTemporary => "optimizer_temporary",
            Kind::Gradients => "gradients",
            Kind::BackwardTemporary => "backward_temporary",
            Kind::Activations => "activations",
            Kind::CublasWorkspace => "cublas_workspace",
            Kind::Other => "other",
        }
    }
}

/// The cuBLAS workspace PyTorch allocates per handle and stream on Hopper
/// (`CUBLAS_WORKSPACE_CONFIG` default `:4096:8` = 32 MiB).
pub const CUBLAS_WORKSPACE_BYTES: u64 = 33_554_432;

pub(crate) fn is_python(f: &Frame<'_>) -> bool {
    f.filename.ends_with(".py")
}

pub(crate) fn is_library(f: &Frame<'_>) -> bool {
    let p = f.filename.replace('\\', "/");
    p.contains("/torch/")
        || p.starts_with("torch/")
        || (p.contains("/lib/python3") && !p.contains("-packages/"))
        || p.starts_with('<')
}

fn short_path(p: &str) -> String {
    let parts: Vec<&str> = p.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// The allocation site: the first Python frame that is not in torch or the
/// standard library (`file:line in function`).
pub fn site_of(snap: &Snapshot, stack: StackId) -> String {
    let mut first_py = None;
    let mut first_any = None;
    for f in snap.frames(stack) {
        if first_any.is_none() {
            first_any = Some(f);
        }
        if is_python(&f) {
            if first_py.is_none() {
                first_py = Some(f);
            }
            if !is_library(&f) {
                return format!("{}:{} in {}", short_path(f.filename), f.line, f.name);
            }
        }
    }
    match (first_py, first_any) {
        (Some(f), _) => format!("{}:{} in {}", short_path(f.filename), f.line, f.name),
        (None, Some(_)) => format!("<no Python frame> {}", cpp_site(snap, stack)),
        (None, None) => "<no stack recorded>".to_string(),
    }
}

/// The most telling C++ frame of a stack with no Python frame: an autograd
/// node (`AddmmBackward0::apply`), else an operator (`at::_ops::mm`), else
/// the first frame outside the allocator and the unwinder.
fn cpp_site(snap: &Snapshot, stack: StackId) -> String {
    let short = |n: &str| n.split('(').next().unwrap_or(n).to_string();
    let frames: Vec<Frame<'_>> = snap.frames(stack).collect();
    if let Some(f) = frames
        .iter()
        .find(|f| f.name.starts_with("torch::autograd::generated::") && f.name.contains("::apply("))
    {
        return short(f.name)
            .trim_start_matches("torch::autograd::generated::")
            .to_string();
    }
    if let Some(f) = frames.iter().find(|f| f.name.starts_with("at::_ops::")) {
        return short(f.name);
    }
    let noise = [
        "torch::unwind",
        "torch::CapturedTraceback",
        "torch::cuda::",
        "c10::",
        "at::detail::empty",
    ];
    frames
        .iter()
        .find(|f| !noise.iter().any(|p| f.name.starts_with(p)))
        .map_or_else(|| short(frames[0].name), |f| short(f.name))
}

/// The nn module path: the `forward` frames, outermost first.
pub fn module_path(snap: &Snapshot, stack: StackId) -> Option<String> {
    let mut v: Vec<String> = snap
        .frames(stack)
        .filter(|f| is_python(f) && f.name == "forward")
        .map(|f| {
            let stem = f
                .filename
                .rsplit('/')
                .next()
                .unwrap_or("")
                .trim_end_matches(".py");
            format!("{stem}.forward")
        })
        .collect();
    v.reverse();
    (!v.is_empty()).then(|| v.join(" > "))
}

/// The full stack, one `file:line in name` per frame, innermost first.
pub fn stack_lines(snap: &Snapshot, stack: StackId) -> Vec<String> {
    snap.frames(stack)
        .map(|f| {
            if f.line > 0 {
                format!("{}:{} in {}", f.filename, f.line, f.name)
            } else {
                format!("{} ({})", f.name, f.filename)
            }
        })
        .collect()
}

/// `Optimizer.step` intervals from `external_annotations`.
#[derive(Debug, Clone, Default)]
pub struct Intervals {
    /// (start, end, name), sorted.
    steps: Vec<(i64, i64, String)>,
    /// `ends_max[i]`: the latest end among `steps[..=i]`.
    ends_max: Vec<i64>,
}

impl Intervals {
    /// Pair the START/END annotations of `Optimizer.step` on `device`.
    pub fn from_snapshot(snap: &Snapshot, device: usize) -> Intervals {
        let mut open: HashMap<&str, i64> = HashMap::new();
        let mut steps = Vec::new();
        for a in snap
            .external_annotations
            .iter()
            .filter(|a| a.device == device as i64 && a.name.starts_with("Optimizer.step"))
        {
            if a.stage == "START" {
                open.insert(&a.name, a.time_us);
            } else if let Some(s) = open.remove(a.name.as_str()) {
                steps.push((s, a.time_us, a.name.clone()));
            }
        }
        steps.sort();
        let ends_max = steps
            .iter()
            .scan(i64::MIN, |m, s| {
                *m = (*m).max(s.1);
                Some(*m)
            })
            .collect();
        Intervals { steps, ends_max }
    }

    /// The first step (in order) with `start <= t <= end`.
    fn step_at(&self, t: i64) -> Option<&(i64, i64, String)> {
        // Candidates start at or before t; the first of them ending at or
        // after t is where the running maximum of ends first reaches t.
        let started = self.steps.partition_point(|s| s.0 <= t);
        let j = self.ends_max.partition_point(|&e| e < t);
        (j < started).then(|| &self.steps[j])
    }

    /// The first step starting at or after `t`.
    fn next_step_after(&self, t: i64) -> Option<&(i64, i64, String)> {
        self.steps.get(self.steps.partition_point(|s| s.0 < t))
    }
}

/// What a stack says about the allocations made under it, found once per
/// stack: the frames the classification rules look for.
#[derive(Debug, Clone, Default)]
pub struct StackFacts {
    /// Evidence of a cuBLAS frame.
    cublas: Option<String>,
    /// Whether any frame is Python.
    has_python: bool,
    /// Evidence of `Module._apply` / `.cuda()` / `.to()`.
    parameters: Option<String>,
    /// A frame in torch/optim: (function, `file:line`).
    optim: Option<(String, String)>,
    /// Where backward runs, in words.
    backward: Option<String>,
    /// Evidence of a `forward` / `_call_impl` frame.
    forward: Option<String>,
    /// The role `vramscope estimate` gave the allocation, in a predicted
    /// snapshot (frame `vramscope::category::<name>`).
    declared: Option<String>,
}

impl StackFacts {
    /// Read the frames of `stack`.
    pub fn of(snap: &Snapshot, stack: StackId) -> StackFacts {
        let frames: Vec<Frame<'_>> = snap.frames(stack).collect();
        let cublas = frames
            .iter()
            .find(|f| {
                let n = f.name.to_ascii_lowercase();
                n.contains("cublas") || n.contains("getcurrentcudablashandle")
            })
            .map(|f| format!("C++ frame `{}`", f.name));
        let module_frame = |name: &str| {
            frames.iter().find(|f| {
                f.name == name
                    && f.filename
                        .replace('\\', "/")
                        .ends_with("torch/nn/modules/module.py")
            })
        };
        let parameters = ["_apply", "cuda", "to"].iter().find_map(|n| {
            module_frame(n)
                .map(|f| format!("frame Module.{} (torch/nn/modules/module.py:{})", n, f.line))
        });
        let optim = frames
            .iter()
            .find(|f| f.filename.replace('\\', "/").contains("torch/optim/"))
            .map(|f| {
                (
                    f.name.to_string(),
                    format!("{}:{}", short_path(f.filename), f.line),
                )
            });
        let backward = frames
            .iter()
            .find(|f| {
                let p = f.filename.replace('\\', "/");
                (p.contains("torch/autograd/")
                    && (f.name == "backward" || f.name == "_engine_run_backward"))
                    || p.contains("torch/_tensor.py") && f.name == "backward"
                    || f.name.starts_with("torch::autograd::Engine::")
            })
            .map(|f| {
                if is_python(f) {
                    format!("{} ({}:{})", f.name, short_path(f.filename), f.line)
                } else {
                    format!("C++ frame `{}`", f.name.split('(').next().unwrap_or(f.name))
                }
            });
        let forward = frames
            .iter()
            .find(|f| is_python(f) && (f.name == "forward" || f.name == "_call_impl"))
            .map(|f| {
                format!(
                    "allocated under {} ({}:{}), outside backward",
                    f.name,
                    short_path(f.filename),
                    f.line
                )
            });
        let declared = frames
            .iter()
            .find_map(|f| f.name.strip_prefix("vramscope::category::"))
            .map(str::to_owned);
        StackFacts {
            declared,
            cublas,
            has_python: frames.iter().any(is_python),
            parameters,
            optim,
            backward,
            forward,
        }
    }
}

/// Classify one allocation; returns the kind and the evidence.
/// `free_time` is the time of its `free_requested` (`i64::MAX` when that
/// entry has no time), `None` when it is alive at the end.
pub fn classify(
    snap: &Snapshot,
    a: &Allocation,
    steps: &Intervals,
    free_time: Option<i64>,
) -> (Kind, String) {
    classify_with(&StackFacts::of(snap, a.stack), a, steps, free_time)
}

/// [`classify`] with the facts of the allocation's stack already read.
pub fn classify_with(
    facts: &StackFacts,
    a: &Allocation,
    steps: &Intervals,
    free_time: Option<i64>,
) -> (Kind, String) {
    if let Some(ev) = &facts.cublas {
        return (Kind::CublasWorkspace, ev.clone());
    }
    if a.size == CUBLAS_WORKSPACE_BYTES && !facts.has_python && a.start.is_some() {
        return (
            Kind::CublasWorkspace,
            "32 MiB (33554432 bytes) allocation with no Python frame: the cuBLAS workspace size"
                .into(),
        );
    }
    if let Some(cat) = &facts.declared {
        if let Some(kind) = declared_kind(cat, facts) {
            let ev = format!("predicted by vramscope estimate: `{cat}`");
            return (kind, ev);
        }
    }
    if let Some(ev) = &facts.parameters {
        return (Kind::Parameters, ev.clone());
    }
    let outlives = |end_t: i64| free_time.is_none_or(|ft| ft > end_t);
    if let Some((_, e, name)) = a.time_us.and_then(|t| steps.step_at(t)) {
        return if outlives(*e) {
            (
                Kind::OptimizerState,
                format!("allocated inside annotation `{name}` and alive after it ends"),
            )
        } else {
            (
                Kind::OptimizerTemporary,
                format!("allocated and freed inside annotation `{name}`"),
            )
        };
    }
    if let Some((name, loc)) = &facts.optim {
        return if free_time.is_none() {
            (
                Kind::OptimizerState,
                format!("frame {name} in torch/optim ({loc}); alive at the end"),
            )
        } else {
            (
                Kind::OptimizerTemporary,
                format!("frame {name} in torch/optim ({loc}); freed before the end"),
            )
        };
    }
    if let Some(loc) = &facts.backward {
        let next = a.time_us.and_then(|t| steps.next_step_after(t));
        return match (next, free_time) {
            (Some((s, _, name)), ft) if ft.is_none_or(|ft| ft >= *s) => (
                Kind::Gradients,
                format!("allocated under {loc}; alive into `{name}`"),
            ),
            (None, None) => (
                Kind::Gradients,
                format!("allocated under {loc}; alive at the end"),
            ),
            _ => (
                Kind::BackwardTemporary,
                format!("allocated under {loc}; freed before the optimizer step"),
            ),
        };
    }
    if let Some(ev) = &facts.forward {
        return (Kind::Activations, ev.clone());
    }
    if a.start.is_none() {
        return (Kind::Other, "allocated before the trace began".into());
    }
    (Kind::Other, "no frame matched a rule".into())
}

/// The kind of a category the eager twin recorded (`vramscope::category::`
/// frames of a predicted snapshot); scratch memory goes with its phase.
fn declared_kind(cat: &str, facts: &StackFacts) -> Option<Kind> {
    let scratch = || {
        if facts.optim.is_some() {
            Kind::OptimizerTemporary
        } else if facts.backward.is_some() {
            Kind::BackwardTemporary
        } else {
            Kind::Activations
        }
    };
    Some(match cat {
        "parameter" | "buffer" => Kind::Parameters,
        "optimizer_state" => Kind::OptimizerState,
        "gradient" => Kind::Gradients,
        "saved_for_backward" | "output" | "input" => Kind::Activations,
        "temporary" | "workspace" => scratch(),
        _ => return None,
    })
}

/// Per-stack answers (site, module path, classification facts), each
/// computed once however many allocations share the stack.
#[derive(Default)]
pub struct StackCache {
    map: HashMap<StackId, usize>,
    items: Vec<StackInfo>,
}

/// What [`StackCache`] knows about one stack.
pub struct StackInfo {
    /// [`site_of`].
    pub site: String,
    /// [`module_path()`].
    pub module_path: Option<String>,
    /// [`StackFacts::of`].
    pub facts: StackFacts,
}

impl StackCache {
    /// The answers for `stack`.
    pub fn get(&mut self, snap: &Snapshot, stack: StackId) -> &StackInfo {
        let i = *self.map.entry(stack).or_insert_with(|| {
            self.items.push(StackInfo {
                site: site_of(snap, stack),
                module_path: module_path(snap, stack),
                facts: StackFacts::of(snap, stack),
            });
            self.items.len() - 1
        });
        &self.items[i]
    }
}

/// The time of the `free_requested` that ended `a` (`i64::MAX` when that
/// entry has no time), `None` when `a` is alive at the end.
pub fn free_time(trace: Option<&Trace>, a: &Allocation) -> Option<i64> {
    a.end
        .and_then(|e| trace.and_then(|t| t.time_us(e)))
        .or(a.end.map(|_| i64::MAX))
}

fn layout_json(l: &timeline::Layout) -> LayoutJson {
    LayoutJson {
        inactive_split_bytes: l.inactive_split_bytes,
        inactive_split_blocks: l.inactive_split_blocks,
        largest_free_block_bytes: l.largest_free_block,
        releasable_bytes: l.releasable_bytes,
    }
}

fn time_at(trace: Option<&Trace>, i: Option<usize>) -> Option<i64> {
    trace?.time_us(i?)
}

/// Build the timeline and analyse it.
pub fn analyze(snap: &Snapshot, cfg: &AllocatorConfig, opts: &Options) -> Report {
    let tl = timeline::build_window(
        snap,
        opts.device,
        cfg,
        opts.timeline_points,
        opts.range.clone(),
    );
    analyze_timeline(snap, &tl, opts)
}

/// Analyse a built timeline (built with `opts.timeline_points`).
pub fn analyze_timeline(snap: &Snapshot, tl: &Timeline, opts: &Options) -> Report {
    let d = opts.device;
    let n = tl.entries;
    let pa = tl.peak_allocated.index;
    let trace = snap.device_traces.get(d);
    let mut cache = StackCache::default();

    let (live_at_peak, categories) = live_at(snap, tl, pa, opts);

    // Fragmentation.
    let end_layout = timeline::final_layout(snap, d);
    let (a_pk, r_pk) = tl.at_peak;
    let fragmentation = Fragmentation {
        reserved_minus_allocated_at_peak_bytes: pa.map_or(0, |_| r_pk - a_pk.min(r_pk)),
        at_peak: tl.layout_at_peak.as_ref().map(layout_json),
        at_end: layout_json(&end_layout),
        empty_cache_would_release_bytes: end_layout.releasable_bytes,
    };

    let ooms = tl
        .ooms
        .iter()
        .map(|o| Oom {
            trace_index: o.trace_index,
            requested_bytes: o.requested,
            device_free_bytes: o.device_free,
            allocated_before_bytes: o.allocated,
            reserved_before_bytes: o.reserved,
            site: cache.get(snap, o.stack).site.clone(),
            stack: if opts.stacks {
                stack_lines(snap, o.stack)
            } else {
                Vec::new()
            },
        })
        .collect();

    let timeline = tl
        .samples
        .iter()
        .map(|s| Point {
            trace_index: s.trace_index,
            time_us: time_at(trace, Some(s.trace_index)),
            allocated_bytes: s.allocated,
            active_bytes: s.active,
            reserved_bytes: s.reserved,
        })
        .collect();

    let mut unknown = Vec::new();
    if let Some(why) = &tl.truncated {
        unknown.push(format!(
            "the trace does not start at the first allocation ({why}): \
             peaks before the first entry are unknown; the counters start from a baseline \
             reconstructed from the final segments ({} allocated, {} reserved)",
            tl.baseline.0, tl.baseline.2
        ));
    }
    if tl.estimated_sizes > 0 {
        unknown.push(format!(
            "{} allocation(s) have sizes estimated with round_size (their blocks were not followed)",
            tl.estimated_sizes
        ));
    }
    let (fa, _, fr) = timeline::final_counters(snap, d);
    if tl.truncated.is_none() && n > 0 && (tl.last.0 != fa || tl.last.2 != fr) {
        unknown.push(format!(
            "the trace's end ({} allocated, {} reserved) differs from the final segments ({fa}, {fr})",
            tl.last.0, tl.last.2
        ));
    }

    Report {
        schema_version: crate::schema::SCHEMA_VERSION,
        snapshot: String::new(),
        device: d,
        trace_entries: n,
        trace_complete: tl.truncated.is_none(),
        unknown,
        peak_allocated_bytes: tl.peak_allocated.bytes,
        peak_trace_index: pa,
        peak_time_us: time_at(trace, pa),
        peak_active_bytes: tl.peak_active.bytes,
        peak_active_trace_index: tl.peak_active.index,
        peak_reserved_bytes: tl.peak_reserved.bytes,
        peak_reserved_trace_index: tl.peak_reserved.index,
        peak_reserved_time_us: time_at(trace, tl.peak_reserved.index),
        final_allocated_bytes: fa,
        final_reserved_bytes: fr,
        live_at_peak,
        categories,
        fragmentation,
        ooms,
        timeline,
        range: opts.range.as_ref().map(|r| TraceRange {
            from: r.start.min(n),
            to: r.end.min(n),
        }),
    }
}

/// What is live right after trace entry `point` (all that was allocated
/// before the trace and never freed when `None`), classified and grouped by
/// site, the heaviest first (`opts.top` of each list), with the bytes of
/// each category.
pub fn live_at(
    snap: &Snapshot,
    tl: &Timeline,
    point: Option<usize>,
    opts: &Options,
) -> (LiveAtPeak, Vec<Category>) {
    let pa = point;
    let steps = Intervals::from_snapshot(snap, opts.device);
    let trace = snap.device_traces.get(opts.device);
    let empty = Trace::new();
    let tr = trace.unwrap_or(&empty);
    let mut cache = StackCache::default();
    // Live there, classified.
    let live: Vec<(Allocation, Kind, String)> = tl
        .live_after(pa)
        .into_iter()
        .filter_map(|k| tl.allocation(tr, k))
        .map(|a| {
            let facts = &cache.get(snap, a.stack).facts;
            let (kind, ev) = classify_with(facts, &a, &steps, free_time(trace, &a));
            (a, kind, ev)
        })
        .collect();
    let mut site_ix: HashMap<String, usize> = HashMap::new();
    let mut sites: Vec<Site> = Vec::new();
    let mut cats: HashMap<Kind, Category> = HashMap::new();
    let mut live_bytes = 0;
    for (a, kind, ev) in &live {
        live_bytes += a.size;
        let info = cache.get(snap, a.stack);
        let i = *site_ix.entry(info.site.clone()).or_insert_with(|| {
            sites.push(Site {
                site: info.site.clone(),
                module_path: info.module_path.clone(),
                bytes: 0,
                count: 0,
                category: kind.name().into(),
                categories: Vec::new(),
                stack: Vec::new(),
                largest: 0,
            });
            sites.len() - 1
        });
        let s = &mut sites[i];
        s.bytes += a.size;
        s.count += 1;
        match s.categories.iter_mut().find(|c| c.category == kind.name()) {
            Some(c) => c.bytes += a.size,
            None => s.categories.push(SiteCategory {
                category: kind.name().into(),
                bytes: a.size,
            }),
        }
        if a.size > s.largest {
            s.largest = a.size;
            if opts.stacks {
                s.stack = stack_lines(snap, a.stack);
            }
        }
        let c = cats.entry(*kind).or_insert_with(|| Category {
            category: kind.name().into(),
            bytes: 0,
            count: 0,
            evidence: Vec::new(),
        });
        c.bytes += a.size;
        c.count += 1;
        if c.evidence.len() < 3 && !c.evidence.contains(ev) {
            c.evidence.push(ev.clone());
        }
    }
    for s in &mut sites {
        s.categories
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
        if let Some(c) = s.categories.first() {
            s.category = c.category.clone();
        }
    }
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    let site_count = sites.len();
    let mut categories: Vec<Category> = cats.into_values().collect();
    categories.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
    let mut order: Vec<usize> = (0..live.len()).collect();
    order.sort_by(|&x, &y| live[y].0.size.cmp(&live[x].0.size).then(x.cmp(&y)));
    let top_tensors = order
        .iter()
        .take(opts.top)
        .map(|&k| {
            let (a, kind, _) = &live[k];
            Tensor {
                addr: a.addr,
                bytes: a.size,
                requested_bytes: a.requested,
                alloc_trace_index: a.start,
                site: cache.get(snap, a.stack).site.clone(),
                category: kind.name().into(),
                stack: if opts.stacks {
                    stack_lines(snap, a.stack)
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    sites.truncate(opts.top);
    (
        LiveAtPeak {
            bytes: live_bytes,
            count: live.len(),
            site_count,
            sites,
            top_tensors,
        },
        categories,
    )
}
