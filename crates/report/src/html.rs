//! The HTML renderer: one self-contained page (no network), the data
//! embedded as JSON in a `<script>` tag, drawn with vanilla JS on a canvas.
//!
//! The Active Memory Timeline follows pytorch.org/memory_viz: each large
//! allocation is a band stacked on those allocated before it, sliding down
//! when one below it is freed. Only the [`MAX_BANDS`] largest allocations
//! get their own band; the rest are summarised by the grey area of total
//! allocated bytes behind them, so a million-entry trace draws as fast as a
//! small one. Open `page.html#selftest` to run the page's self-test (used by
//! the test suite in headless Chromium).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::Serialize;
use serde_json::{json, Value};
use vramscope_alloc::AllocatorConfig;
use vramscope_snapshot::{BlockState, Snapshot, Trace};

use crate::analysis::{classify_with, free_time, is_library, is_python, Intervals, StackCache};
use crate::schema::Report;
use crate::timeline::{self, Allocation, Timeline};

/// Most allocations drawn as their own band.
pub const MAX_BANDS: usize = 600;

/// Most band offsets (`p`) the static page holds, all bands together.
pub const MAX_BAND_POINTS: usize = 100_000;

/// Most out-of-memory events the static page lists.
pub const MAX_OOMS: usize = 100;

/// Build the page for `snap` (analysed as `report`).
pub fn render_snapshot(snap: &Snapshot, cfg: &AllocatorConfig, report: &Report) -> String {
    let window = report.range.map(|r| r.from..r.to);
    let tl = timeline::build_window(
        snap,
        report.device,
        cfg,
        report.timeline.len().max(1),
        window,
    );
    render_snapshot_timeline(snap, &tl, report)
}

/// [`render_snapshot`] with the report's own timeline (the one
/// [`crate::analysis::analyze_timeline`] made it from: same device and
/// window), so that the trace is followed once.
pub fn render_snapshot_timeline(snap: &Snapshot, tl: &Timeline, report: &Report) -> String {
    let n = tl.entries;
    let (w0, w1) = report.range.map_or((0, n), |r| (r.from, r.to));
    // as many bands as the points budget allows (each band's offsets
    // change as those below it are freed: 600 bands can hold 720,000)
    let mut max = MAX_BANDS;
    let (bands, stacks) = loop {
        let (b, st) = band_data(snap, tl, report.device, w0..w1, max);
        let points: usize = b.iter().map(|v| v.p.len()).sum();
        if points <= MAX_BAND_POINTS || max <= 50 {
            break (b, st);
        }
        max /= 2;
    };
    let span = w1.saturating_sub(w0);
    let (segments, nseg) = segments_json(snap, report.device, MAX_SEGMENTS);
    // the page lists the first out-of-memory events only, and draws the
    // report's timeline from `total` (the report's own copy left out: it
    // was a third of the page)
    let mut rep = report.clone();
    let nooms = rep.ooms.len();
    rep.ooms.truncate(MAX_OOMS);
    rep.timeline = Vec::new();
    let mut rep = serde_json::to_value(&rep).expect("a report is JSON");
    if let Value::Object(m) = &mut rep {
        m.remove("timeline");
    }
    let data = PageData {
        bands: &bands,
        bucket: span.div_ceil(report.timeline.len().max(1)).max(1),
        n,
        nalloc: tl.num_allocations(),
        nooms,
        nseg,
        // a value: its keys sorted as serde_json's map sorts them
        report: rep,
        segments: &segments,
        stacks: &stacks,
        t0: snap
            .device_traces
            .get(report.device)
            .and_then(|t| t.time_us(0)),
        total: report
            .timeline
            .iter()
            .map(|p| {
                (
                    p.trace_index,
                    p.allocated_bytes,
                    p.reserved_bytes,
                    p.time_us,
                )
            })
            .collect(),
    };
    let mut data = serde_json::to_string(&data).expect("the page's data is JSON");
    // "</" would end the script tag; copied only where the data holds one
    if data.contains("</") {
        data = data.replace("</", "<\\/");
    }
    fill(
        TEMPLATE,
        &[
            ("/*__STYLE__*/", STYLE),
            ("/*__COMMON__*/", COMMON_JS),
            ("__TITLE__", &escape(&report.snapshot)),
            ("__DATA__", &data),
        ],
    )
}

/// The stylesheet both pages share (this report and `vramscope view`'s).
pub const STYLE: &str = include_str!("page.css");

/// The script both pages share: sizes and times as text, the category
/// colours, the bands' paths and hit test.
pub const COMMON_JS: &str = include_str!("page.js");

/// `template` with each placeholder replaced by its value, in one pass (a
/// value that holds a placeholder's name stays as it is).
pub fn fill(template: &str, subs: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + subs.iter().map(|s| s.1.len()).sum::<usize>());
    let mut rest = template;
    loop {
        let next = subs
            .iter()
            .filter_map(|&(k, v)| rest.find(k).map(|at| (at, k, v)))
            .min_by_key(|x| x.0);
        let Some((at, k, v)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        out.push_str(v);
        rest = &rest[at + k.len()..];
    }
}

/// The largest allocations alive in trace entries `window` (by bytes times
/// their lifetime inside it, at most `max`) as bands stacked the way
/// memory_viz stacks them (each on those allocated before it, sliding
/// down when one below is freed), with their stacks (`st` indexes the
/// second list, each stack once): `{s, e, sz, p: [[entry, offset]...],
/// site, cat, ev, st}`.
pub(crate) fn band_data(
    snap: &Snapshot,
    tl: &timeline::Timeline,
    device: usize,
    window: std::ops::Range<usize>,
    max: usize,
) -> (Vec<Band>, Vec<Value>) {
    let n = tl.entries;
    let empty = Trace::new();
    let trace = snap.device_traces.get(device);
    let tr = trace.unwrap_or(&empty);
    // The largest allocations (by bytes x lifetime, then the earlier) get bands
    // (within the window: an allocation outside it weighs nothing).
    let (w0, w1) = (window.start.min(n), window.end.min(n));
    let life = |start: Option<usize>, end: Option<usize>| {
        end.unwrap_or(n)
            .min(w1)
            .saturating_sub(start.unwrap_or(0).max(w0)) as u128
    };
    let cap = (w1 - w0.min(w1)) as u128 / 20 + 1;
    // the `max` heaviest, ties to the earlier allocation, kept in a heap of
    // `max` (no per-allocation list: a trace of millions stays small)
    let mut heap: BinaryHeap<Reverse<(u128, Reverse<usize>)>> = BinaryHeap::new();
    // a full heap's lightest weight: a later allocation no heavier stays
    // out (it also loses the tie, coming later)
    let mut least: Option<u128> = None;
    for (k, (size, start, end)) in tl.lifetimes().enumerate() {
        let l = life(start, end);
        if l == 0 && n > 0 {
            continue;
        }
        let w = size as u128 * l.min(cap);
        if least.is_some_and(|m| w <= m) {
            continue;
        }
        heap.push(Reverse((w, Reverse(k))));
        if heap.len() > max {
            heap.pop();
        }
        if heap.len() >= max {
            least = heap.peek().map(|m| m.0 .0);
        }
    }
    let mut order: Vec<usize> = heap.into_iter().map(|Reverse((_, Reverse(k)))| k).collect();
    order.sort_unstable();
    let allocs: Vec<Allocation> = order.iter().filter_map(|&k| tl.allocation(tr, k)).collect();
    // Stack the bands: events (index, is_free, band).
    let mut events: Vec<(usize, bool, usize)> = Vec::new();
    for (b, a) in allocs.iter().enumerate() {
        events.push((a.start.unwrap_or(0), false, b));
        events.push((a.end.unwrap_or(n), true, b));
    }
    events.sort();
    let mut live: Vec<usize> = Vec::new();
    let mut off = vec![0u64; allocs.len()];
    let mut pts: Vec<Vec<(usize, u64)>> = vec![Vec::new(); allocs.len()];
    for (x, free, b) in events {
        let size = allocs[b].size;
        if free {
            if let Some(p) = live.iter().position(|&v| v == b) {
                live.remove(p);
                pts[b].push((x, off[b]));
                for &u in &live[p..] {
                    off[u] -= size;
                    pts[u].push((x, off[u]));
                }
            }
        } else {
            off[b] = live.last().map_or(0, |&u| off[u] + allocs[u].size);
            live.push(b);
            pts[b].push((x, off[b]));
        }
    }
    let mut d = Describer::new(snap, device);
    let mut bands = Vec::with_capacity(allocs.len());
    for (a, p) in allocs.iter().zip(pts) {
        let (site, cat, ev, st) = d.describe(a);
        bands.push(Band {
            cat,
            e: a.end.unwrap_or(n),
            ev,
            p,
            s: a.start.unwrap_or(0),
            site,
            st,
            sz: a.size,
        });
    }
    (bands, d.stacks)
}

/// One band of [`band_data`], serialised as the JSON object the pages
/// read. Its fields are in the order of their names, the order serde_json's
/// map gives an object's keys, so that the page is what a `json!` object of
/// the same fields made (without a value tree of every offset).
#[derive(Debug, Serialize)]
pub(crate) struct Band {
    /// Category.
    cat: &'static str,
    /// The trace entry after its last (its free, or the trace's end).
    e: usize,
    /// Why the category.
    ev: String,
    /// Its offset from each trace entry where it moves: `[entry, offset]`.
    pub(crate) p: Vec<(usize, u64)>,
    /// Its first trace entry (0 when allocated before the trace).
    s: usize,
    /// Where it was allocated.
    site: String,
    /// Its stack, an index into the stacks beside the bands.
    st: usize,
    /// Bytes.
    sz: u64,
}

/// The static page's data, serialised straight to text: the fields in the
/// order of their names, as a `json!` object of them would be.
#[derive(Serialize)]
struct PageData<'a> {
    bands: &'a [Band],
    bucket: usize,
    n: usize,
    nalloc: usize,
    nooms: usize,
    nseg: usize,
    report: Value,
    segments: &'a [Value],
    stacks: &'a [Value],
    t0: Option<i64>,
    total: Vec<(usize, u64, u64, Option<i64>)>,
}

/// What the pages say of an allocation: its site, category and evidence,
/// and its stack as an index into [`Describer::stacks`] (each stack once,
/// as the hover shows it: [`display_stack`]).
pub(crate) struct Describer<'a> {
    snap: &'a Snapshot,
    trace: Option<&'a Trace>,
    steps: Intervals,
    cache: StackCache,
    stack_ix: HashMap<u32, usize>,
    /// The stacks described so far.
    pub stacks: Vec<Value>,
}

impl<'a> Describer<'a> {
    pub(crate) fn new(snap: &'a Snapshot, device: usize) -> Describer<'a> {
        Describer {
            snap,
            trace: snap.device_traces.get(device),
            steps: Intervals::from_snapshot(snap, device),
            cache: StackCache::default(),
            stack_ix: HashMap::new(),
            stacks: Vec::new(),
        }
    }

    /// (site, category, evidence, stack index) of `a`.
    pub(crate) fn describe(&mut self, a: &Allocation) -> (String, &'static str, String, usize) {
        let (snap, stacks) = (self.snap, &mut self.stacks);
        let si = *self.stack_ix.entry(a.stack.0).or_insert_with(|| {
            stacks.push(json!(display_stack(snap, a.stack)));
            stacks.len() - 1
        });
        let info = self.cache.get(snap, a.stack);
        let (kind, ev) = classify_with(&info.facts, a, &self.steps, free_time(self.trace, a));
        (info.site.clone(), kind.name(), ev, si)
    }
}

/// Most segments the static page lists (it draws as many, the largest).
pub const MAX_SEGMENTS: usize = 20;

/// Most blocks listed in one segment of the static page: past it, the
/// segment is drawn in this many equal slices, each in the state holding
/// most of its bytes.
pub const MAX_SEGMENT_BLOCKS: usize = 2000;

/// The device's segments at the end, the `max` largest (ties: the lower
/// address): `{addr, size, blocks: [[size, state]]}` (state `a` allocated,
/// `i` inactive, `p` pending free; neighbours in one state joined; past
/// [`MAX_SEGMENT_BLOCKS`], slices of the segment), and how many there are.
pub(crate) fn segments_json(snap: &Snapshot, device: usize, max: usize) -> (Vec<Value>, usize) {
    let mut segs: Vec<&vramscope_snapshot::Segment> = snap
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .collect();
    let count = segs.len();
    segs.sort_by(|a, b| {
        b.total_size
            .cmp(&a.total_size)
            .then(a.address.cmp(&b.address))
    });
    segs.truncate(max);
    let list = segs
        .into_iter()
        .map(|s| {
            let mut runs: Vec<(u64, char)> = Vec::new();
            for b in &s.blocks {
                let st = match b.state {
                    BlockState::ActiveAllocated => 'a',
                    BlockState::Inactive => 'i',
                    _ => 'p',
                };
                match runs.last_mut() {
                    Some(r) if r.1 == st => r.0 += b.size,
                    _ => runs.push((b.size, st)),
                }
            }
            if runs.len() > MAX_SEGMENT_BLOCKS {
                runs = slices(&runs, s.total_size, MAX_SEGMENT_BLOCKS);
            }
            let blocks: Vec<Value> = runs
                .iter()
                .map(|&(sz, st)| json!([sz, st.to_string()]))
                .collect();
            json!({"addr": format!("{:#x}", s.address), "size": s.total_size, "blocks": blocks})
        })
        .collect();
    (list, count)
}

/// `runs` (sizes and states, in address order, adding up to `total`) cut
/// into `k` slices of equal size, each in the state with most bytes in it.
fn slices(runs: &[(u64, char)], total: u64, k: usize) -> Vec<(u64, char)> {
    let mut out: Vec<(u64, char)> = Vec::with_capacity(k);
    let (mut r, mut used) = (0usize, 0u64);
    for j in 0..k as u64 {
        let (lo, hi) = (total * j / k as u64, total * (j + 1) / k as u64);
        let mut by: [(u64, char); 3] = [(0, 'a'), (0, 'i'), (0, 'p')];
        let mut at = lo;
        while at < hi && r < runs.len() {
            let end = (used + runs[r].0).min(hi);
            let take = end.saturating_sub(at);
            if let Some(e) = by.iter_mut().find(|e| e.1 == runs[r].1) {
                e.0 += take;
            }
            at = end;
            if end == used + runs[r].0 {
                used += runs[r].0;
                r += 1;
            }
        }
        let best = by.iter().max_by_key(|e| e.0).map_or('i', |e| e.1);
        match out.last_mut() {
            Some(o) if o.1 == best => o.0 += hi - lo,
            _ => out.push((hi - lo, best)),
        }
    }
    out
}

/// C++ frames of the allocator and the stack capture itself: the same in
/// every stack, so the hover leaves them out.
const INTERNAL_FRAMES: &[&str] = &[
    "torch::unwind::",
    "torch::CapturedTraceback::",
    "torch::cuda::(anonymous namespace)::gather",
    "c10::cuda::CUDACachingAllocator::",
    "at::detail::empty_",
    "vramscope::category::",
    "_Py",
    "Py",
];

/// Most frames of each group a hover shows.
const HOVER_FRAMES: usize = 12;

/// A stack as the hover shows it: the user's own frames first (Python
/// frames outside torch and the standard library), then PyTorch's Python
/// frames, then the C++ frames without the allocator's and the capture's
/// own (their arguments cut), each group innermost first.
pub(crate) fn display_stack(snap: &Snapshot, stack: vramscope_snapshot::StackId) -> Vec<String> {
    let mut user = Vec::new();
    let mut torch = Vec::new();
    let mut cpp = Vec::new();
    let mut hidden = 0;
    for f in snap.frames(stack) {
        if is_python(&f) {
            let line = format!("{}:{} in {}", f.filename, f.line, f.name);
            if is_library(&f) {
                torch.push(line);
            } else {
                user.push(line);
            }
        } else if INTERNAL_FRAMES.iter().any(|p| f.name.starts_with(p)) {
            hidden += 1;
        } else {
            cpp.push(short_cpp_name(f.name));
        }
    }
    let mut out = Vec::new();
    let group = |title: String, lines: Vec<String>, out: &mut Vec<String>| {
        if lines.is_empty() {
            return;
        }
        out.push(title);
        let more = lines.len().saturating_sub(HOVER_FRAMES);
        out.extend(
            lines
                .into_iter()
                .take(HOVER_FRAMES)
                .map(|l| format!("  {l}")),
        );
        if more > 0 {
            out.push(format!("  ... {more} more"));
        }
    };
    group("your code:".into(), user, &mut out);
    group("PyTorch (Python):".into(), torch, &mut out);
    let title = if hidden > 0 {
        format!("C++ ({hidden} allocator frames left out):")
    } else {
        "C++:".into()
    };
    group(title, cpp, &mut out);
    out
}

/// A C++ frame's name without its arguments and template arguments:
/// `c10::impl::wrap_kernel_functor_unboxed_<...>::call(...)` reads
/// `c10::impl::wrap_kernel_functor_unboxed_<>::call`.
fn short_cpp_name(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for (i, c) in name.char_indices() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push('<');
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push('>');
                }
            }
            // `(anonymous namespace)::` is part of the name; any other
            // parenthesis at the top level opens the arguments
            '(' if depth == 0 && !name[i..].starts_with("(anonymous namespace)") => break,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Text made safe inside HTML elements and attributes.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const TEMPLATE: &str = include_str!("report.html");

#[cfg(test)]
mod tests {
    use super::{fill, short_cpp_name, slices};

    #[test]
    fn a_segment_of_many_blocks_is_cut_into_slices() {
        // 10,000 alternating blocks of 1 KiB allocated, 3 KiB free
        let runs: Vec<(u64, char)> = (0..10_000)
            .map(|k| if k % 2 == 0 { (1024, 'a') } else { (3072, 'i') })
            .collect();
        let total: u64 = runs.iter().map(|r| r.0).sum();
        let s = slices(&runs, total, 2000);
        assert!(s.len() <= 2000);
        assert_eq!(s.iter().map(|r| r.0).sum::<u64>(), total);
        // a slice of 10 KiB holds 2.5 KiB allocated, 7.5 KiB free
        assert_eq!(s, vec![(total, 'i')]);
        let half = [(1000, 'a'), (1000, 'i')];
        assert_eq!(slices(&half, 2000, 4), vec![(1000, 'a'), (1000, 'i')]);
    }

    #[test]
    fn placeholders_are_filled_once() {
        assert_eq!(
            fill("<t>__T__</t>__D__", &[("__T__", "__D__"), ("__D__", "x")]),
            "<t>__D__</t>x"
        );
    }

    #[test]
    fn cpp_names_lose_their_arguments() {
        assert_eq!(
            short_cpp_name("at::native::relu(at::Tensor const&)"),
            "at::native::relu"
        );
        assert_eq!(
            short_cpp_name("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::F<at::Tensor (at::Tensor const&)>, at::Tensor>::call(c10::OperatorKernel*)"),
            "c10::impl::wrap_kernel_functor_unboxed_<>::call"
        );
        assert_eq!(
            short_cpp_name(
                "torch::autograd::VariableType::(anonymous namespace)::relu(c10::DispatchKeySet)"
            ),
            "torch::autograd::VariableType::(anonymous namespace)::relu"
        );
        assert_eq!(
            short_cpp_name("a::b<int>::(anonymous namespace)::f(x)"),
            "a::b<>::(anonymous namespace)::f"
        );
    }
}
