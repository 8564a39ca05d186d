//! The allocator's state at any trace entry: its segments and the active
//! blocks in them (memory_viz's "Allocator State History",
//! `torch/utils/viz/MemoryViz.js`, `MemoryView.simulate_memory`).
//!
//! memory_viz undoes the trace from the final segments back to the entry
//! asked for. Here the same state is read from lifetimes known in advance:
//! each segment's (from `segment_alloc`/`segment_map` to
//! `segment_free`/`segment_unmap`, or from before the trace where the
//! final segments hold it), each allocation's ([`Timeline`]) and each
//! deferred free's (`free_requested` to `free_completed`, the
//! `record_stream` case). A query costs one scan of the allocations, not of
//! the trace.
//!
//! Free (inactive) blocks are not listed: the caching allocator merges a
//! freed block with free neighbours in its segment (`free_block` →
//! `try_merge_blocks`, CUDACachingAllocator.cpp), so the free blocks are
//! exactly the gaps between active blocks.

use std::collections::{BTreeMap, HashMap};

use vramscope_alloc::TraceAction;
use vramscope_snapshot::{Snapshot, Trace};

use crate::timeline::Timeline;

/// One segment's lifetime (a contiguous mapped range, for expandable
/// segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SegLife {
    addr: u64,
    size: u64,
    stream: u64,
    expandable: bool,
    /// Entry of its `segment_alloc`/`segment_map`; `None`: before the trace.
    start: Option<usize>,
    /// Entry of its `segment_free`/`segment_unmap`; `None`: alive at the end.
    end: Option<usize>,
}

impl SegLife {
    fn alive_after(&self, i: usize) -> bool {
        self.start.is_none_or(|s| s <= i) && self.end.is_none_or(|e| e > i)
    }
}

/// A segment at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentAt {
    /// Start address.
    pub addr: u64,
    /// Bytes (contiguous mapped ranges of one stream merged, as PyTorch's
    /// `snapshot()` reports an expandable segment).
    pub size: u64,
    /// Stream.
    pub stream: u64,
    /// Whether it is (part of) an expandable segment.
    pub expandable: bool,
    /// Its active blocks in address order.
    pub blocks: Vec<BlockAt>,
}

/// An active block at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockAt {
    /// The allocation ([`Timeline::allocation`]'s index).
    pub allocation: usize,
    /// Address.
    pub addr: u64,
    /// Block bytes.
    pub size: u64,
    /// Freed by the program, not yet reusable (`active_pending_free`).
    pub pending_free: bool,
}

/// The allocator state after one trace entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StateAt {
    /// Segments in address order.
    pub segments: Vec<SegmentAt>,
    /// Active blocks in no known segment (a damaged trace).
    pub unplaced: usize,
    /// Blocks left out because a later allocation took their memory (a
    /// trace that starts mid-run: see [`Timeline::truncated`]).
    pub stale: usize,
}

/// What [`History::at`] needs, computed once per trace.
pub struct History {
    segs: Vec<SegLife>,
    /// Allocations whose free was deferred past the next entry:
    /// (allocation, `free_requested` entry, `free_completed` entry or the
    /// trace's length when never completed).
    deferred: Vec<(usize, usize, usize)>,
    /// Allocations whose lifetime the trace's addresses tell otherwise
    /// than the timeline (a trace that starts mid-run, where the timeline
    /// could not follow every block), by allocation: the `free_requested`
    /// entry an `alloc` pairs with by address (`None`: alive at the end),
    /// or `Err(())` for a free the timeline took for memory allocated
    /// before the trace that an `alloc` of the trace made.
    fixes: Vec<(usize, Result<Option<usize>, ()>)>,
}

impl History {
    /// Scan `device`'s trace of `snap` (`tl` its timeline).
    pub fn new(snap: &Snapshot, tl: &Timeline, device: usize) -> History {
        let empty = Trace::new();
        let trace = snap.device_traces.get(device).unwrap_or(&empty);
        let n = trace.len();
        let mut segs: Vec<SegLife> = Vec::new();
        // open segments by start address → index in `segs`
        let mut open: BTreeMap<u64, usize> = BTreeMap::new();
        let mut requested: HashMap<u64, usize> = HashMap::new();
        let mut late: HashMap<usize, usize> = HashMap::new();
        // the allocations the trace made, in trace order, and the
        // timeline's ends of all of them
        let lives: Vec<(u64, Option<usize>, Option<usize>)> = tl.lifetimes().collect();
        let mut made = lives
            .iter()
            .enumerate()
            .filter(|(_, l)| l.1.is_some())
            .map(|(k, _)| k);
        let mut live_at: HashMap<u64, usize> = HashMap::new();
        let mut end_of: HashMap<usize, Option<usize>> = HashMap::new();
        let mut paired: Vec<usize> = Vec::new();
        for (i, e) in trace.iter().enumerate() {
            match e.action {
                Some(TraceAction::Alloc) => {
                    // (a block still open here lost its free where the
                    // trace did not say: the timeline's end stands)
                    if let Some(k) = made.next() {
                        live_at.insert(e.addr, k);
                    }
                }
                Some(TraceAction::FreeRequested) => {
                    requested.insert(e.addr, i);
                    if let Some(k) = live_at.remove(&e.addr) {
                        if lives[k].2 != Some(i) {
                            end_of.insert(k, Some(i));
                            paired.push(i);
                        }
                    }
                }
                Some(a @ (TraceAction::SegmentAlloc | TraceAction::SegmentMap)) => {
                    open.insert(e.addr, segs.len());
                    segs.push(SegLife {
                        addr: e.addr,
                        size: e.size,
                        stream: e.stream,
                        expandable: a == TraceAction::SegmentMap,
                        start: Some(i),
                        end: None,
                    });
                }
                Some(a @ (TraceAction::SegmentFree | TraceAction::SegmentUnmap)) => {
                    let (lo, hi) = (e.addr, e.addr.saturating_add(e.size));
                    let hit: Vec<(u64, usize)> = open
                        .range(..hi)
                        .rev()
                        .take_while(|(_, &k)| segs[k].addr + segs[k].size > lo)
                        .map(|(&a, &k)| (a, k))
                        .collect();
                    if hit.is_empty() {
                        // mapped before the trace
                        segs.push(SegLife {
                            addr: e.addr,
                            size: e.size,
                            stream: e.stream,
                            expandable: a == TraceAction::SegmentUnmap,
                            start: None,
                            end: Some(i),
                        });
                    }
                    for (a, k) in hit {
                        // the part inside [lo, hi) ends here; the parts
                        // outside it stay open with the same start
                        open.remove(&a);
                        let s = segs[k];
                        let (s0, s1) = (s.addr, s.addr + s.size);
                        let (c0, c1) = (s0.max(lo), s1.min(hi));
                        segs[k] = SegLife {
                            addr: c0,
                            size: c1 - c0,
                            end: Some(i),
                            ..s
                        };
                        for (p0, p1) in [(s0, c0), (c1, s1)] {
                            if p1 > p0 {
                                open.insert(p0, segs.len());
                                segs.push(SegLife {
                                    addr: p0,
                                    size: p1 - p0,
                                    ..s
                                });
                            }
                        }
                    }
                }
                Some(TraceAction::FreeCompleted) => {
                    if let Some(r) = requested.remove(&e.addr) {
                        if i > r + 1 {
                            late.insert(r, i);
                        }
                    }
                }
                _ => {}
            }
        }
        for k in live_at.into_values() {
            if lives[k].2.is_some() {
                end_of.insert(k, None);
            }
        }
        for r in requested.into_values() {
            late.insert(r, n);
        }
        // the final segments' memory no segment of the trace holds at the
        // end was there before the trace
        let at_end: Vec<(u64, u64)> = open
            .values()
            .map(|&k| (segs[k].addr, segs[k].addr + segs[k].size))
            .collect();
        for s in snap.segments.iter().filter(|s| s.device == device as i64) {
            let (mut a, end) = (s.address, s.address + s.total_size);
            let from = at_end.partition_point(|&(_, e)| e <= a);
            for &(o0, o1) in &at_end[from..] {
                if o0 >= end {
                    break;
                }
                if o0 > a {
                    segs.push(pre_trace(a, o0, s));
                }
                a = a.max(o1);
            }
            if a < end {
                segs.push(pre_trace(a, end, s));
            }
        }
        segs.sort_by_key(|s| (s.addr, s.start));
        let paired: std::collections::HashSet<usize> = paired.into_iter().collect();
        let mut fixes: Vec<(usize, Result<Option<usize>, ()>)> = lives
            .iter()
            .enumerate()
            .filter_map(|(k, &(_, s, e))| match s {
                Some(_) => end_of.get(&k).map(|&want| (k, Ok(want))),
                None => e.filter(|r| paired.contains(r)).map(|_| (k, Err(()))),
            })
            .collect();
        fixes.sort_unstable_by_key(|f| f.0);
        let deferred = if late.is_empty() {
            Vec::new()
        } else {
            tl.lifetimes()
                .enumerate()
                .filter_map(|(k, (_, _, e))| {
                    let r = e?;
                    late.get(&r).map(|&c| (k, r, c))
                })
                .collect()
        };
        History {
            segs,
            deferred,
            fixes,
        }
    }

    /// The segments and active blocks right after trace entry `i`.
    pub fn at(&self, snap: &Snapshot, tl: &Timeline, device: usize, i: usize) -> StateAt {
        let empty = Trace::new();
        let trace = snap.device_traces.get(device).unwrap_or(&empty);
        // segments, expandable ranges of one stream merged when contiguous
        let mut segments: Vec<SegmentAt> = Vec::new();
        for s in self.segs.iter().filter(|s| s.alive_after(i)) {
            if let Some(p) = segments.last_mut() {
                if s.expandable && p.expandable && p.stream == s.stream && p.addr + p.size == s.addr
                {
                    p.size += s.size;
                    continue;
                }
            }
            segments.push(SegmentAt {
                addr: s.addr,
                size: s.size,
                stream: s.stream,
                expandable: s.expandable,
                blocks: Vec::new(),
            });
        }
        // active blocks: allocated, or freed and waiting (the free at `i`
        // itself completes at an entry after `i` at the earliest)
        let mut fix = self.fixes.iter().peekable();
        let mut blocks: Vec<(usize, bool)> = tl
            .lifetimes()
            .enumerate()
            .filter_map(|(k, (_, s, mut e))| {
                if fix.peek().is_some_and(|f| f.0 == k) {
                    match fix.next()?.1 {
                        Ok(want) => e = want,
                        Err(()) => return None,
                    }
                }
                if s.is_some_and(|s| s > i) {
                    return None;
                }
                match e {
                    None => Some((k, false)),
                    Some(e) if e > i => Some((k, false)),
                    Some(e) if e == i => Some((k, true)),
                    _ => None,
                }
            })
            .collect();
        blocks.extend(
            self.deferred
                .iter()
                .filter(|&&(_, r, c)| r < i && i < c)
                .map(|&(k, _, _)| (k, true)),
        );
        let mut placed: Vec<(BlockAt, Option<usize>)> = blocks
            .into_iter()
            .filter_map(|(k, pending_free)| {
                let a = tl.allocation(trace, k)?;
                let b = BlockAt {
                    allocation: k,
                    addr: a.addr,
                    size: a.size,
                    pending_free,
                };
                Some((b, a.start))
            })
            .collect();
        placed.sort_by_key(|(b, s)| (b.addr, *s));
        // Two active blocks cannot overlap: where a trace that starts
        // mid-run lost track of a free (memory allocated before it), the
        // later `alloc` there shows the earlier block gone.
        let mut kept: Vec<(BlockAt, Option<usize>)> = Vec::with_capacity(placed.len());
        let mut stale = 0;
        for (b, s) in placed {
            if let Some((p, ps)) = kept.last() {
                if b.addr < p.addr + p.size {
                    stale += 1;
                    if s < *ps {
                        continue;
                    }
                    kept.pop();
                }
            }
            kept.push((b, s));
        }
        let mut unplaced = 0;
        for (b, _) in kept {
            let j = segments.partition_point(|s| s.addr <= b.addr);
            match j.checked_sub(1).map(|j| &mut segments[j]) {
                Some(s) if b.addr < s.addr + s.size => s.blocks.push(b),
                _ => unplaced += 1,
            }
        }
        StateAt {
            segments,
            unplaced,
            stale,
        }
    }
}

/// `[a, b)` of final segment `s`, there since before the trace.
fn pre_trace(a: u64, b: u64, s: &vramscope_snapshot::Segment) -> SegLife {
    SegLife {
        addr: a,
        size: b - a,
        stream: s.stream,
        expandable: s.is_expandable,
        start: None,
        end: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline;
    use vramscope_snapshot::BlockState;

    /// A segment's address and size, its active blocks' (address, size,
    /// pending free).
    type SegRow = (u64, u64, Vec<(u64, u64, bool)>);

    fn check(path: &str) {
        let snap = vramscope_snapshot::read_snapshot_file(path).unwrap();
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        let n = snap.device_traces[0].len();
        let each = timeline::build_window(&snap, 0, &cfg, n.max(1), None);
        let h = History::new(&snap, &each, 0);
        // after the last entry: the final segments, block for block
        let last = h.at(&snap, &each, 0, n - 1);
        let mut want: Vec<SegRow> = Vec::new();
        for s in snap.segments.iter().filter(|s| s.device == 0) {
            let mut addr = s.address;
            let mut bl = Vec::new();
            for b in &s.blocks {
                let a = b.address.unwrap_or(addr);
                addr = a + b.size;
                if b.state != BlockState::Inactive {
                    bl.push((a, b.size, b.state == BlockState::ActivePendingFree));
                }
            }
            want.push((s.address, s.total_size, bl));
        }
        want.sort();
        let got: Vec<SegRow> = last
            .segments
            .iter()
            .map(|s| {
                let bl = s.blocks.iter().map(|b| (b.addr, b.size, b.pending_free));
                (s.addr, s.size, bl.collect())
            })
            .collect();
        assert_eq!(got, want, "{path}");
        assert_eq!(last.unplaced, 0);
        // after every entry (a sample of them): the blocks add up to the
        // allocated and active counters, the segments to the reserved one
        let step = (n / 300).max(1);
        for i in (0..n).step_by(step).chain([n - 1]) {
            let st = h.at(&snap, &each, 0, i);
            let s = &each.samples[i];
            let blocks = st.segments.iter().flat_map(|s| &s.blocks);
            let alloc: u64 = blocks
                .clone()
                .filter(|b| !b.pending_free)
                .map(|b| b.size)
                .sum();
            let active: u64 = blocks.map(|b| b.size).sum();
            let reserved: u64 = st.segments.iter().map(|s| s.size).sum();
            assert_eq!(
                (alloc, active, reserved),
                (s.allocated, s.active, s.reserved),
                "{path} after entry {i}"
            );
            assert_eq!(st.unplaced, 0, "{path} after entry {i}");
        }
    }

    #[test]
    fn the_state_adds_up_to_the_counters_and_ends_at_the_final_segments() {
        for f in [
            "alloc/training.pickle",
            "alloc/expandable_empty_cache.pickle",
            "seeds/snapshot_encoder_adamw_h100.pickle",
            "snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
        ] {
            let path = vramscope_testkit::xz::fixture_file(&format!("fixtures/{f}"));
            check(path.to_str().expect("a UTF-8 path"));
        }
    }
}
