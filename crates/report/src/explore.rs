//! The questions `vramscope view` asks of one snapshot, answered as JSON:
//! the report, any range of the trace in full detail, what is live at any
//! entry, and where a site or module allocates. Pure: the viewer's server
//! (crates/view) only routes requests here.

use std::collections::HashMap;

use serde_json::{json, Value};
use vramscope_alloc::AllocatorConfig;
use vramscope_snapshot::Snapshot;

use crate::analysis::{analyze_timeline, live_at, module_path, site_of, Options};
use crate::html::{band_data, segments_json, MAX_BANDS};
use crate::schema::Report;
use crate::timeline::{self, Timeline};

/// Most allocations a search lists.
pub const MAX_HITS: usize = 2000;

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
    /// Site and module path of each stack, computed on first use.
    sites: HashMap<u32, (String, Option<String>)>,
}

impl Explorer {
    /// Analyse `snap` (named `name` in the report) for the device and list
    /// lengths of `opts`.
    pub fn new(snap: Snapshot, cfg: AllocatorConfig, opts: Options, name: &str) -> Explorer {
        let tl = timeline::build(&snap, opts.device, &cfg, opts.timeline_points);
        let mut report = analyze_timeline(&snap, &tl, &opts);
        report.snapshot = name.to_owned();
        // one sample per entry: the counters after each
        let each = timeline::build_window(&snap, opts.device, &cfg, tl.entries.max(1), None);
        let allocated = each.samples.iter().map(|s| s.allocated).collect();
        let reserved = each.samples.iter().map(|s| s.reserved).collect();
        Explorer {
            snap,
            opts,
            tl,
            report,
            allocated,
            reserved,
            sites: HashMap::new(),
        }
    }

    /// The report of the whole trace.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The report, the trace's length, the allocations' count and the
    /// segments at the end.
    pub fn report_json(&self) -> Value {
        json!({
            "report": self.report, "n": self.tl.entries,
            "nalloc": self.tl.num_allocations(),
            "segments": segments_json(&self.snap, self.opts.device),
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
            total.push(json!([a.0, a.1, r.1]));
            if peak.is_none_or(|p| a.1 > p.1) {
                peak = Some(a);
            }
            if peak_r.is_none_or(|p| r.1 > p.1) {
                peak_r = Some(r);
            }
        }
        let (bands, stacks) =
            band_data(&self.snap, &self.tl, self.opts.device, from..to, MAX_BANDS);
        let peak_json = |p: Option<(usize, u64)>| json!({"index": p.map(|p| p.0), "bytes": p.map_or(0, |p| p.1)});
        json!({
            "from": from, "to": to, "total": total, "bands": bands, "stacks": stacks,
            "bucket": bucket, "peak": peak_json(peak), "peak_reserved": peak_json(peak_r),
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
    /// site with its count and bytes, and up to [`MAX_HITS`] allocations
    /// `[start, end, bytes, site index]` in trace order.
    pub fn search_json(&mut self, q: &str) -> Value {
        let q = q.trim().to_lowercase();
        let n = self.tl.entries;
        let empty = vramscope_snapshot::Trace::new();
        let trace = self
            .snap
            .device_traces
            .get(self.opts.device)
            .unwrap_or(&empty);
        let mut site_ix: HashMap<String, usize> = HashMap::new();
        let mut sites: Vec<(String, Option<String>, usize, u64)> = Vec::new();
        let mut hits = Vec::new();
        let mut matched = 0usize;
        if !q.is_empty() {
            for k in 0..self.tl.num_allocations() {
                let Some(a) = self.tl.allocation(trace, k) else {
                    continue;
                };
                let snap = &self.snap;
                let (site, module) = self
                    .sites
                    .entry(a.stack.0)
                    .or_insert_with(|| (site_of(snap, a.stack), module_path(snap, a.stack)));
                let hit = site.to_lowercase().contains(&q)
                    || module
                        .as_ref()
                        .is_some_and(|m| m.to_lowercase().contains(&q));
                if !hit {
                    continue;
                }
                matched += 1;
                let s = *site_ix.entry(site.clone()).or_insert_with(|| {
                    sites.push((site.clone(), module.clone(), 0, 0));
                    sites.len() - 1
                });
                sites[s].2 += 1;
                sites[s].3 += a.size;
                if hits.len() < MAX_HITS {
                    hits.push(json!([a.start.unwrap_or(0), a.end.unwrap_or(n), a.size, s]));
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    impl Explorer {
        fn cfg_for_tests(&self) -> AllocatorConfig {
            vramscope_replay::from_snapshot::config(&self.snap).0
        }
    }

    fn explorer() -> Explorer {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/alloc/training.pickle"
        );
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
                .map(|p| json!([p.trace_index, p.allocated, p.reserved]))
                .collect();
            let got = x.range_json(a, b, points);
            assert_eq!(got["total"], json!(want), "{a}..{b}");
            assert_eq!(got["peak"]["index"], json!(w.peak_allocated.index));
        }
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
