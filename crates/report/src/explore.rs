//! The questions `vramscope view` asks of one snapshot, answered as JSON:
//! the report, any range of the trace in full detail, what is live at any
//! entry, and where a site or module allocates. Pure: the viewer's server
//! (crates/view) only routes requests here.

use std::collections::HashMap;

use serde_json::{json, Value};
use vramscope_alloc::AllocatorConfig;
use vramscope_snapshot::Snapshot;

use crate::analysis::{analyze_timeline, live_at, module_path, site_of, Options};
use crate::html::{band_data, Describer, MAX_BANDS};
use crate::schema::Report;
use crate::state::History;
use crate::timeline::{self, Timeline};

/// Most allocations a search lists.
pub const MAX_HITS: usize = 2000;

/// Most blocks the allocator state lists (the largest; the rest counted).
pub const MAX_STATE_BLOCKS: usize = 20_000;

/// A snapshot with its timeline and report, ready for queries.
pub struct Explorer {
    snap: Snapshot,
    opts: Options,
    tl: Timeline,
    report: Report,
    /// Allocated and reserved bytes right after each trace entry (16 bytes
    /// an entry), so that any range is answered by one scan of it.
    allocated: Vec<u64>,
    reserved: Vec<u64>,
    /// Segments' and allocations' lifetimes, for the state at any entry.
    history: History,
    /// Site and module path of each stack, computed on first use.
    sites: HashMap<u32, (String, Option<String>)>,
    /// Per stack id, its allocations (the first search gathers them).
    by_stack: Option<Vec<StackTotal>>,
}

impl Explorer {
    /// Analyse `snap` (named `name` in the report) for the device and list
    /// lengths of `opts`.
    pub fn new(snap: Snapshot, cfg: AllocatorConfig, opts: Options, name: &str) -> Explorer {
        // one pass, one sample per entry: the counters after each; the
        // report's curve is their bucket maxima, as `timeline::build` takes
        // them (the first maximum of allocated bytes, the maximum of the
        // others)
        let n = snap.device_traces.get(opts.device).map_or(0, |t| t.len());
        let mut tl = timeline::build_window(&snap, opts.device, &cfg, n.max(1), None);
        let allocated: Vec<u64> = tl.samples.iter().map(|s| s.allocated).collect();
        let reserved: Vec<u64> = tl.samples.iter().map(|s| s.reserved).collect();
        let bucket = n.div_ceil(opts.timeline_points.max(1)).max(1);
        tl.samples = tl
            .samples
            .chunks(bucket)
            .map(|c| {
                let mut s = c[0];
                for x in &c[1..] {
                    if x.allocated > s.allocated {
                        s.allocated = x.allocated;
                        s.trace_index = x.trace_index;
                    }
                    s.active = s.active.max(x.active);
                    s.reserved = s.reserved.max(x.reserved);
                }
                s
            })
            .collect();
        tl.samples.shrink_to_fit();
        let mut report = analyze_timeline(&snap, &tl, &opts);
        report.snapshot = name.to_owned();
        let history = History::new(&snap, &tl, opts.device);
        Explorer {
            snap,
            opts,
            tl,
            report,
            allocated,
            reserved,
            history,
            sites: HashMap::new(),
            by_stack: None,
        }
    }

    /// The report of the whole trace.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The report (its first [`crate::html::MAX_OOMS`] OOMs), the trace's
    /// length, the allocations' count and every OOM's entry and bytes.
    pub fn report_json(&self) -> Value {
        // every OOM as [trace entry, requested bytes]; in full, the first
        // hundred (a trace can hold thousands)
        let ooms: Vec<Value> = self
            .report
            .ooms
            .iter()
            .map(|o| json!([o.trace_index, o.requested_bytes]))
            .collect();
        let mut report = self.report.clone();
        report.ooms.truncate(crate::html::MAX_OOMS);
        json!({
            "report": report, "n": self.tl.entries,
            "nalloc": self.tl.num_allocations(), "ooms": ooms,
        })
    }

    /// Trace entries `from..to` (clamped to the trace) in full detail: the
    /// curve of allocated and reserved bytes as the maximum of each of at
    /// most `points` buckets (the peaks exact), and the largest
    /// allocations alive there as bands (every one, when the range holds
    /// at most [`MAX_BANDS`]).
    pub fn range_json(&self, from: usize, to: usize, points: usize) -> Value {
        let n = self.allocated.len();
        let (from, to) = (from.min(n), to.min(n).max(from.min(n)));
        let points = points.clamp(1, 20_000);
        let bucket = (to - from).div_ceil(points).max(1);
        // per bucket, the first maximum of each counter (as timeline::build)
        let mut total = Vec::new();
        let mut peak: Option<(usize, u64)> = None;
        let mut peak_r: Option<(usize, u64)> = None;
        for start in (from..to).step_by(bucket) {
            let end = (start + bucket).min(to);
            let (mut a, mut r) = (
                (start, self.allocated[start]),
                (start, self.reserved[start]),
            );
            for i in start + 1..end {
                if self.allocated[i] > a.1 {
                    a = (i, self.allocated[i]);
                }
                if self.reserved[i] > r.1 {
                    r = (i, self.reserved[i]);
                }
            }
            total.push(json!([a.0, a.1, r.1, self.time(a.0)]));
            if peak.is_none_or(|p| a.1 > p.1) {
                peak = Some(a);
            }
            if peak_r.is_none_or(|p| r.1 > p.1) {
                peak_r = Some(r);
            }
        }
        let (mut bands, stacks) =
            band_data(&self.snap, &self.tl, self.opts.device, from..to, MAX_BANDS);
        for b in &mut bands {
            b.p = in_window(std::mem::take(&mut b.p), from, to);
        }
        let peak_json = |p: Option<(usize, u64)>| json!({"index": p.map(|p| p.0), "bytes": p.map_or(0, |p| p.1)});
        let (step, ticks) = self.ticks(from, to, 8);
        json!({
            "from": from, "to": to, "total": total, "bands": bands, "stacks": stacks,
            "bucket": bucket, "peak": peak_json(peak), "peak_reserved": peak_json(peak_r),
            "t0": self.time(0), "tick_us": step, "ticks": ticks,
        })
    }

    /// The time of trace entry `i`, when recorded.
    fn time(&self, i: usize) -> Option<i64> {
        self.snap.device_traces.get(self.opts.device)?.time_us(i)
    }

    /// A time axis for entries `from..to`: a round step in microseconds
    /// (1, 2 or 5 times a power of ten) giving about `want` ticks, and for
    /// each tick `[entry, µs]` (µs a multiple of the step after the first
    /// entry's time), the first entry at or after that time (entries are
    /// recorded in time order). Empty without times.
    fn ticks(&self, from: usize, to: usize, want: i64) -> (i64, Vec<Value>) {
        let (Some(a), Some(b)) = (self.time(from), self.time(to.saturating_sub(1))) else {
            return (0, Vec::new());
        };
        if to <= from || b <= a {
            return (0, Vec::new());
        }
        let raw = ((b - a) / want).max(1);
        let mut step = 1i64;
        while step * 10 <= raw {
            step *= 10;
        }
        step *= if raw >= 5 * step {
            5
        } else if raw >= 2 * step {
            2
        } else {
            1
        };
        let mut ticks = Vec::new();
        // round in seconds since the first entry
        let t0 = self.time(0).unwrap_or(0);
        let mut t = t0 + (a - t0).div_euclid(step) * step;
        if t < a {
            t += step;
        }
        let mut lo = from;
        while t <= b && ticks.len() < 100 {
            // first entry in lo..to with a time at or after t
            let (mut l, mut h) = (lo, to);
            while l < h {
                let m = l + (h - l) / 2;
                if self.time(m).is_some_and(|x| x < t) {
                    l = m + 1;
                } else {
                    h = m;
                }
            }
            ticks.push(json!([l, t]));
            lo = l;
            t += step;
        }
        (step, ticks)
    }

    /// The allocator's state right after trace entry `i` (clamped to the
    /// trace), as memory_viz's "Allocator State History" shows it: every
    /// segment (`a` its address, `size`, `stream`, `exp` expandable) and
    /// its active blocks `{o: offset in the segment, sz, rq: requested,
    /// pf: pending free, s, e: alloc and free entries, site, cat, ev, st:
    /// stack index}` (at most [`MAX_STATE_BLOCKS`], the largest), with the
    /// allocated, active and reserved bytes they add up to.
    pub fn state_json(&self, i: usize) -> Value {
        let n = self.tl.entries;
        if n == 0 {
            return json!({"index": null, "segments": [], "stacks": []});
        }
        let i = i.min(n - 1);
        let dev = self.opts.device;
        let st = self.history.at(&self.snap, &self.tl, dev, i);
        let empty = vramscope_snapshot::Trace::new();
        let trace = self.snap.device_traces.get(dev).unwrap_or(&empty);
        let all: usize = st.segments.iter().map(|s| s.blocks.len()).sum();
        // the size below which blocks are left out, when there are too many
        let mut sizes: Vec<u64> = st
            .segments
            .iter()
            .flat_map(|s| s.blocks.iter().map(|b| b.size))
            .collect();
        let cut = if all > MAX_STATE_BLOCKS {
            sizes.sort_unstable_by(|a, b| b.cmp(a));
            sizes[MAX_STATE_BLOCKS - 1]
        } else {
            0
        };
        let mut d = Describer::new(&self.snap, dev);
        let (mut allocated, mut active, mut reserved, mut listed) = (0u64, 0u64, 0u64, 0usize);
        let segments: Vec<Value> = st
            .segments
            .iter()
            .map(|s| {
                reserved += s.size;
                let mut blocks = Vec::new();
                for b in &s.blocks {
                    active += b.size;
                    if !b.pending_free {
                        allocated += b.size;
                    }
                    if b.size < cut || listed >= MAX_STATE_BLOCKS {
                        continue;
                    }
                    let Some(a) = self.tl.allocation(trace, b.allocation) else {
                        continue;
                    };
                    listed += 1;
                    let (site, cat, ev, si) = d.describe(&a);
                    blocks.push(json!({
                        "o": b.addr - s.addr, "sz": b.size, "rq": a.requested, "pf": b.pending_free,
                        "s": a.start, "e": a.end, "site": site, "cat": cat, "ev": ev, "st": si,
                    }));
                }
                json!({
                    "a": format!("{:#x}", s.addr), "size": s.size, "stream": s.stream,
                    "exp": s.expandable, "blocks": blocks,
                })
            })
            .collect();
        json!({
            "index": i, "time_us": self.time(i), "t0": self.time(0),
            "allocated_bytes": allocated, "active_bytes": active, "reserved_bytes": reserved,
            "blocks": all, "blocks_listed": listed, "unplaced": st.unplaced, "stale": st.stale,
            "segments": segments, "stacks": d.stacks,
        })
    }

    /// What is live right after trace entry `i` (clamped to the trace):
    /// allocated and reserved bytes there, the categories and the sites.
    pub fn at_json(&self, i: usize) -> Value {
        let n = self.tl.entries;
        if n == 0 {
            return json!({"index": null});
        }
        let i = i.min(n - 1);
        let (live, categories) = live_at(&self.snap, &self.tl, Some(i), &self.opts);
        let time = self
            .snap
            .device_traces
            .get(self.opts.device)
            .and_then(|t| t.time_us(i));
        json!({
            "index": i, "time_us": time,
            "allocated_bytes": self.allocated.get(i), "reserved_bytes": self.reserved.get(i),
            "live": live, "categories": categories,
        })
    }

    /// Allocations whose site (`file:line in function`) or module path
    /// (`model.layers.3.mlp`) contains `q` (ignoring case): each matching
    /// site with its count and bytes (sites in the order of their first
    /// allocation), and up to [`MAX_HITS`] allocations `[start, end, bytes,
    /// site index]` in trace order. The allocations' count, bytes and first
    /// index per stack are gathered by the first search (one pass over the
    /// allocations); a search then matches each stack once and walks the
    /// allocations only for its hits, stopping at the last one listed.
    pub fn search_json(&mut self, q: &str) -> Value {
        let q = q.trim().to_lowercase();
        let n = self.tl.entries;
        let empty = vramscope_snapshot::Trace::new();
        let trace = self
            .snap
            .device_traces
            .get(self.opts.device)
            .unwrap_or(&empty);
        if self.by_stack.is_none() {
            let mut per = vec![StackTotal::default(); self.snap.stacks.num_stacks()];
            for k in 0..self.tl.num_allocations() {
                let Some(t) = self
                    .tl
                    .allocation_stack(trace, k)
                    .and_then(|s| per.get_mut(s.0 as usize))
                else {
                    continue;
                };
                if t.count == 0 {
                    t.first = k;
                }
                t.count += 1;
                t.bytes += self.tl.lifetime(k).map_or(0, |l| l.0);
            }
            self.by_stack = Some(per);
        }
        let per = self.by_stack.as_deref().unwrap_or(&[]);
        // the matching stacks, in the order of their first allocation
        let mut order: Vec<usize> = (0..per.len()).filter(|&s| per[s].count > 0).collect();
        order.sort_unstable_by_key(|&s| per[s].first);
        let mut site_ix: HashMap<String, usize> = HashMap::new();
        let mut sites: Vec<(String, Option<String>, usize, u64)> = Vec::new();
        // per stack: the index of its site among the matches, if it matches
        let mut of_stack: Vec<Option<usize>> = vec![None; per.len()];
        let mut matched = 0usize;
        if !q.is_empty() {
            for s in order {
                let snap = &self.snap;
                let id = vramscope_snapshot::StackId(s as u32);
                let (site, module) = self
                    .sites
                    .entry(s as u32)
                    .or_insert_with(|| (site_of(snap, id), module_path(snap, id)));
                let hit = site.to_lowercase().contains(&q)
                    || module
                        .as_ref()
                        .is_some_and(|m| m.to_lowercase().contains(&q));
                if !hit {
                    continue;
                }
                let ix = *site_ix.entry(site.clone()).or_insert_with(|| {
                    sites.push((site.clone(), module.clone(), 0, 0));
                    sites.len() - 1
                });
                of_stack[s] = Some(ix);
                matched += per[s].count;
                sites[ix].2 += per[s].count;
                sites[ix].3 += per[s].bytes;
            }
        }
        let mut hits = Vec::new();
        let mut k = 0;
        while hits.len() < MAX_HITS.min(matched) && k < self.tl.num_allocations() {
            let s = self
                .tl
                .allocation_stack(trace, k)
                .and_then(|s| of_stack.get(s.0 as usize).copied().flatten());
            if let (Some(s), Some((size, start, end))) = (s, self.tl.lifetime(k)) {
                hits.push(json!([start.unwrap_or(0), end.unwrap_or(n), size, s]));
            }
            k += 1;
        }
        let sites: Vec<Value> = sites
            .into_iter()
            .map(|(site, module, count, bytes)| {
                json!({"site": site, "module_path": module, "count": count, "bytes": bytes})
            })
            .collect();
        json!({"query": q, "matched": matched, "sites": sites, "hits": hits})
    }
}

/// A band's offsets `[entry, offset]` (in entry order) as far as entries
/// `from..=to` need them: the last at or before `from`, then those up to
/// `to`. A band lives across the whole trace while the range may hold 100
/// entries; the offsets it takes outside the range only made the answer
/// larger (1.8 MB for 100 entries of a 10 M-entry trace, 97% of it such
/// offsets), the page draws and hovers the range alone.
fn in_window(p: Vec<(usize, u64)>, from: usize, to: usize) -> Vec<(usize, u64)> {
    let first = p.iter().rposition(|q| q.0 <= from).unwrap_or(0);
    let last = p
        .iter()
        .rposition(|q| q.0 <= to)
        .map_or(first, |j| j.max(first));
    if first == 0 && last + 1 == p.len() {
        return p;
    }
    p[first..=last].to_vec()
}

/// A stack's allocations: how many, their bytes, the first one's index.
#[derive(Clone, Copy, Default)]
struct StackTotal {
    count: usize,
    bytes: u64,
    first: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_testkit::xz::fixture_file;

    impl Explorer {
        fn cfg_for_tests(&self) -> AllocatorConfig {
            vramscope_replay::from_snapshot::config(&self.snap).0
        }
    }

    fn explorer() -> Explorer {
        explorer_of(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/alloc/training.pickle"
        ))
    }

    fn explorer_of(path: impl AsRef<std::path::Path>) -> Explorer {
        let snap = vramscope_snapshot::read_snapshot_file(path).unwrap();
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        Explorer::new(snap, cfg, Options::default(), "training.pickle")
    }

    #[test]
    fn a_range_keeps_the_peak_and_shows_every_allocation_it_holds() {
        let x = explorer();
        let r = x.report().clone();
        let pk = r.peak_trace_index.unwrap();
        let all = x.range_json(0, usize::MAX, 50);
        assert_eq!(all["peak"]["bytes"], r.peak_allocated_bytes);
        assert!(all["total"].as_array().unwrap().len() <= 50);
        let near = x.range_json(pk - 3, pk + 3, 50);
        assert_eq!(near["peak"]["index"], pk);
        assert_eq!(near["peak"]["bytes"], r.peak_allocated_bytes);
        // every allocation alive at the peak has a band in a narrow range
        assert_eq!(
            near["bands"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["s"].as_u64().unwrap() as usize <= pk
                    && (b["e"].as_u64().unwrap() as usize) > pk)
                .count(),
            r.live_at_peak.count
        );
    }

    /// The curve of a range is the timeline's own over that window.
    #[test]
    fn a_range_is_the_timelines_window() {
        let x = explorer();
        let n = x.allocated.len();
        for (a, b, points) in [(n / 3, 2 * n / 3, 37), (0, n, 1000), (5, 9, 50)] {
            let w = timeline::build_window(&x.snap, 0, &x.cfg_for_tests(), points, Some(a..b));
            let want: Vec<Value> = w
                .samples
                .iter()
                .map(|p| {
                    json!([
                        p.trace_index,
                        p.allocated,
                        p.reserved,
                        x.time(p.trace_index)
                    ])
                })
                .collect();
            let got = x.range_json(a, b, points);
            assert_eq!(got["total"], json!(want), "{a}..{b}");
            assert_eq!(got["peak"]["index"], json!(w.peak_allocated.index));
        }
    }

    /// The report of the explorer's single pass is `inspect`'s.
    #[test]
    fn the_report_is_inspects() {
        let x = explorer();
        let mut want = crate::analyze(&x.snap, &x.cfg_for_tests(), &Options::default());
        want.snapshot = "training.pickle".into();
        assert_eq!(x.report(), &want);
    }

    /// The state at the peak adds up to the peak's counters; at the end,
    /// to the final segments'; the time axis has round ticks in order.
    #[test]
    fn the_state_adds_up_and_the_ticks_are_round() {
        let x = explorer();
        let r = x.report().clone();
        let st = x.state_json(r.peak_trace_index.unwrap());
        assert_eq!(st["allocated_bytes"], r.peak_allocated_bytes);
        assert_eq!(
            st["reserved_bytes"],
            x.reserved[r.peak_trace_index.unwrap()]
        );
        let end = x.state_json(usize::MAX);
        assert_eq!(end["allocated_bytes"], r.final_allocated_bytes);
        assert_eq!(end["reserved_bytes"], r.final_reserved_bytes);
        let blocks = end["segments"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["blocks"].as_array().unwrap());
        assert!(blocks.clone().count() > 0);
        assert!(blocks
            .clone()
            .all(|b| b["st"].as_u64().unwrap() < end["stacks"].as_array().unwrap().len() as u64));
        let all = x.range_json(0, usize::MAX, 100);
        let step = all["tick_us"].as_i64().unwrap();
        let ticks = all["ticks"].as_array().unwrap();
        assert!(step > 0 && ticks.len() >= 4 && ticks.len() <= 20, "{all}");
        let mut prev = 0;
        for t in ticks {
            let (e, us) = (t[0].as_u64().unwrap() as usize, t[1].as_i64().unwrap());
            assert_eq!((us - x.time(0).unwrap()) % step, 0);
            assert!(e >= prev && x.time(e).unwrap() >= us);
            assert!(e == 0 || x.time(e - 1).unwrap() < us);
            prev = e;
        }
    }

    /// A narrow range's bands keep their offsets within it (and the one
    /// before it) only: at every entry of the range each band sits where
    /// its offsets over the whole trace put it.
    #[test]
    fn a_ranges_bands_hold_the_offsets_of_the_range_alone() {
        let x = explorer_of(fixture_file(
            "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
        ));
        let n = x.allocated.len();
        let at = |p: &[(usize, u64)], i: usize| {
            let mut o = p[0].1;
            for q in p.iter().take_while(|q| q.0 <= i) {
                o = q.1;
            }
            o
        };
        let mut trimmed = 0;
        for (a, b) in [(n / 2, n / 2 + 100), (0, 50), (n - 40, n), (0, n)] {
            let (full, _) = band_data(&x.snap, &x.tl, x.opts.device, a..b, MAX_BANDS);
            let got = x.range_json(a, b, 50);
            let got = got["bands"].as_array().unwrap();
            assert_eq!(got.len(), full.len());
            for (g, f) in got.iter().zip(&full) {
                let p: Vec<(usize, u64)> = serde_json::from_value(g["p"].clone()).unwrap();
                assert!(p.len() <= f.p.len() && p[1..].iter().all(|q| a < q.0 && q.0 <= b));
                trimmed += f.p.len() - p.len();
                for i in a.max(g["s"].as_u64().unwrap() as usize)..b {
                    assert_eq!(at(&p, i), at(&f.p, i), "entry {i}");
                }
            }
        }
        assert!(trimmed > 0);
    }

    /// The search by stack totals is the walk over every allocation it
    /// replaced: the same sites in the same order, counts, bytes and hits
    /// (the real wrapped trace: allocations from before the trace, listed
    /// first, whose stacks are interned after the trace's; more than
    /// `MAX_HITS` matches).
    #[test]
    fn a_search_is_a_walk_over_every_allocation() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
        search_is_a_walk(explorer_of(format!("{dir}/alloc/training.pickle")));
        let wrapped =
            "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz";
        assert!(search_is_a_walk(explorer_of(fixture_file(wrapped))) > MAX_HITS);
    }

    /// (The number of allocations `"."` matches.)
    fn search_is_a_walk(mut x: Explorer) -> usize {
        let site = x.report().live_at_peak.sites[0].site.clone();
        let func = site.rsplit(" in ").next().unwrap().to_owned();
        let trace = x.snap.device_traces[x.opts.device].clone();
        let n = x.tl.entries;
        for q in [
            site.as_str(),
            func.as_str(),
            ".",
            ":",
            "py",
            "",
            "no such site",
        ] {
            let ql = q.trim().to_lowercase();
            let (mut sites, mut hits, mut matched) =
                (Vec::<(String, u64, u64)>::new(), vec![], 0u64);
            for k in 0..x.tl.num_allocations() {
                let a = x.tl.allocation(&trace, k).unwrap();
                let (s, m) = (site_of(&x.snap, a.stack), module_path(&x.snap, a.stack));
                let hit = !ql.is_empty()
                    && (s.to_lowercase().contains(&ql)
                        || m.is_some_and(|m| m.to_lowercase().contains(&ql)));
                if !hit {
                    continue;
                }
                let ix = match sites.iter().position(|x| x.0 == s) {
                    Some(i) => i,
                    None => {
                        sites.push((s, 0, 0));
                        sites.len() - 1
                    }
                };
                matched += 1;
                sites[ix].1 += 1;
                sites[ix].2 += a.size;
                if hits.len() < MAX_HITS {
                    hits.push(json!([
                        a.start.unwrap_or(0),
                        a.end.unwrap_or(n),
                        a.size,
                        ix
                    ]));
                }
            }
            let got = x.search_json(q);
            assert_eq!(got["matched"], matched, "{q}");
            assert_eq!(got["hits"], json!(hits), "{q}");
            let gs: Vec<(String, u64, u64)> = got["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    let s = v["site"].as_str().unwrap().to_owned();
                    (
                        s,
                        v["count"].as_u64().unwrap(),
                        v["bytes"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(gs, sites, "{q}");
        }
        // the queries above match some, not all, and more than are listed
        assert!(x.search_json(&site)["matched"].as_u64().unwrap() > 0);
        assert_eq!(x.search_json("no such site")["matched"], 0);
        let all = x.search_json(".");
        assert!(all["sites"].as_array().unwrap().len() > 1);
        all["matched"].as_u64().unwrap() as usize
    }

    #[test]
    fn live_at_the_peak_is_the_report_and_search_finds_sites() {
        let mut x = explorer();
        let r = x.report().clone();
        let at = x.at_json(r.peak_trace_index.unwrap());
        assert_eq!(at["allocated_bytes"], r.peak_allocated_bytes);
        assert_eq!(at["live"]["bytes"], r.live_at_peak.bytes);
        let site = &r.live_at_peak.sites[0].site;
        let file = site.split(':').next().unwrap();
        let s = x.search_json(&file.to_uppercase());
        assert!(s["matched"].as_u64().unwrap() > 0);
        assert!(s["sites"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["site"] == *site));
        assert_eq!(x.search_json("no such site anywhere")["matched"], 0);
    }
}
