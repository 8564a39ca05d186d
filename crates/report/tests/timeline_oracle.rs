//! The streaming timeline equals the straightforward one it replaced.
//!
//! `oracle` below is the first implementation of the timeline, kept as the
//! reference: it materialises the counters after every trace entry and keeps
//! all blocks in one `BTreeMap` by address. The fast timeline (hash map,
//! linked segments, no per-entry vectors) must give exactly the same peaks,
//! curve, allocations, layout and notes on every fixture, on truncated
//! copies of them (ring buffer), and on traces damaged at random (entries
//! dropped, duplicated or swapped), where the two "follow by address only"
//! paths are exercised hardest.

use std::collections::BTreeMap;

use vramscope_alloc::{AllocatorConfig, CachingAllocator, TraceAction, MIN_BLOCK_SIZE, SMALL_SIZE};
use vramscope_report::timeline::{self, Allocation, Layout, OomEvent};
use vramscope_snapshot::{BlockState, Snapshot, StackId, Trace};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/alloc");

/// The first timeline's output.
struct OldTimeline {
    allocated: Vec<u64>,
    active: Vec<u64>,
    reserved: Vec<u64>,
    baseline: (u64, u64, u64),
    allocations: Vec<Allocation>,
    ooms: Vec<OomEvent>,
    truncated: Option<String>,
    estimated_sizes: usize,
    layout_at_peak: Option<Layout>,
}

fn oracle(snap: &Snapshot, device: usize, cfg: &AllocatorConfig) -> OldTimeline {
    let empty = Trace::new();
    let trace = snap.device_traces.get(device).unwrap_or(&empty);
    let (allocs, deltas, ooms_raw, sim, _) = run(trace, cfg, None);
    let mut t = assemble(snap, device, trace, allocs, deltas, ooms_raw, sim);
    if let Some(p) = timeline::peak_index(&t.allocated) {
        let (_, _, _, _, layout) = run(trace, cfg, Some(p));
        t.layout_at_peak = layout;
    }
    t
}

/// Compare the fast timeline with the oracle on one snapshot.
fn check(snap: &Snapshot, what: &str) {
    let (cfg, _) = vramscope_replay::from_snapshot::config(snap);
    for device in 0..snap.device_traces.len().max(1) {
        let old = oracle(snap, device, &cfg);
        let points = 37;
        let new = timeline::build(snap, device, &cfg, points);
        let ctx = format!("{what}, device {device}");
        let n = old.allocated.len();
        assert_eq!(new.entries, n, "{ctx}");
        // `inspect --range`: the peaks of a window are the oracle's first
        // maxima inside it; its OOMs are those inside it
        for w in [0..n, n / 3..2 * n / 3, n / 2..n, n.saturating_sub(1)..n] {
            if w.is_empty() {
                continue;
            }
            let win = timeline::build_window(snap, device, &cfg, points, Some(w.clone()));
            let first_max = |v: &Vec<u64>| {
                w.clone()
                    .max_by_key(|&k| (v[k], usize::MAX - k))
                    .map(|k| (k, v[k]))
            };
            let (k, v) = first_max(&old.allocated).unwrap();
            let want = if v == 0 { w.start } else { k };
            let v = if w.start == 0 {
                v.max(old.baseline.0)
            } else {
                v
            };
            assert_eq!(
                (win.peak_allocated.index, win.peak_allocated.bytes),
                (Some(want), v),
                "{ctx}: window {w:?}"
            );
            let (k, v) = first_max(&old.reserved).unwrap();
            let want = if v == 0 { w.start } else { k };
            let v = if w.start == 0 {
                v.max(old.baseline.2)
            } else {
                v
            };
            assert_eq!(
                (win.peak_reserved.index, win.peak_reserved.bytes),
                (Some(want), v),
                "{ctx}: window {w:?} reserved"
            );
            let ooms: Vec<_> = old
                .ooms
                .iter()
                .filter(|o| w.contains(&o.trace_index))
                .cloned()
                .collect();
            assert_eq!(win.ooms, ooms, "{ctx}: window {w:?} ooms");
            assert!(win.samples.len() <= points, "{ctx}");
        }
        {
            let tr = snap.device_traces.get(device).cloned().unwrap_or_default();
            for (k, a) in old.allocations.iter().enumerate() {
                assert_eq!(
                    new.allocation(&tr, k).as_ref(),
                    Some(a),
                    "{ctx}: allocation {k}"
                );
            }
        }
        assert_eq!(new.baseline, old.baseline, "{ctx}: baseline");
        assert_eq!(new.truncated, old.truncated, "{ctx}: truncated");
        assert_eq!(new.estimated_sizes, old.estimated_sizes, "{ctx}");
        assert_eq!(new.ooms, old.ooms, "{ctx}: ooms");
        assert_eq!(
            new.layout_at_peak, old.layout_at_peak,
            "{ctx}: layout at peak"
        );
        let peak = |v: &Vec<u64>, b: u64| {
            let i = timeline::peak_index(v);
            (i, i.map_or(b, |i| v[i].max(b)))
        };
        let pa = peak(&old.allocated, old.baseline.0);
        assert_eq!(
            (new.peak_allocated.index, new.peak_allocated.bytes),
            pa,
            "{ctx}: peak allocated"
        );
        let pac = peak(&old.active, old.baseline.1);
        assert_eq!(
            (new.peak_active.index, new.peak_active.bytes),
            pac,
            "{ctx}: peak active"
        );
        let pr = peak(&old.reserved, old.baseline.2);
        assert_eq!(
            (new.peak_reserved.index, new.peak_reserved.bytes),
            pr,
            "{ctx}: peak reserved"
        );
        if let Some(p) = pa.0 {
            assert_eq!(
                new.at_peak,
                (old.allocated[p], old.reserved[p]),
                "{ctx}: at peak"
            );
        }
        if n > 0 {
            assert_eq!(
                new.last,
                (old.allocated[n - 1], old.active[n - 1], old.reserved[n - 1]),
                "{ctx}: last"
            );
        }
        // The downsampled curve, as the first analysis built it.
        let bucket = n.div_ceil(points).max(1);
        let mut i = 0;
        let mut want = Vec::new();
        while i < n {
            let j = (i + bucket).min(n);
            let k = (i..j)
                .max_by_key(|&k| (old.allocated[k], usize::MAX - k))
                .unwrap();
            want.push((
                k,
                old.allocated[k],
                (i..j).map(|k| old.active[k]).max().unwrap(),
                (i..j).map(|k| old.reserved[k]).max().unwrap(),
            ));
            i = j;
        }
        let got: Vec<_> = new
            .samples
            .iter()
            .map(|s| (s.trace_index, s.allocated, s.active, s.reserved))
            .collect();
        assert_eq!(got, want, "{ctx}: samples");
        let tr = snap.device_traces.get(device).cloned().unwrap_or_default();
        assert_eq!(new.num_allocations(), old.allocations.len(), "{ctx}");
        for (k, a) in old.allocations.iter().enumerate() {
            assert_eq!(
                new.allocation(&tr, k).as_ref(),
                Some(a),
                "{ctx}: allocation {k}"
            );
        }
        // Live at the peak, the way the analysis asks.
        let live_old: Vec<usize> = (0..old.allocations.len())
            .filter(|&k| match pa.0 {
                Some(p) => old.allocations[k].live_after(p),
                None => old.allocations[k].start.is_none() && old.allocations[k].end.is_none(),
            })
            .collect();
        assert_eq!(new.live_after(pa.0), live_old, "{ctx}: live at the peak");
    }
}

fn fixtures() -> Vec<(String, Snapshot)> {
    let mut v: Vec<(String, Snapshot)> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|s| s.to_str()) == Some("pickle"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                vramscope_snapshot::read_snapshot_file(&p).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 14);
    for conf in ["", "expandable_segments:True"] {
        let s = vramscope_testkit::synth::generate(&vramscope_testkit::synth::Options {
            entries: 6_000,
            conf: conf.into(),
            seed: 3,
            ..Default::default()
        })
        .unwrap();
        v.push((format!("synthetic {conf:?}"), s.snapshot));
    }
    v
}

#[test]
fn equals_the_first_timeline_on_every_fixture() {
    for (name, snap) in fixtures() {
        check(&snap, &name);
    }
    let synth = vramscope_testkit::synth::generate(&vramscope_testkit::synth::Options {
        entries: 30_000,
        devices: 2,
        ..Default::default()
    })
    .unwrap();
    check(&synth.snapshot, "synthetic");
}

#[test]
fn equals_the_first_timeline_on_truncated_traces() {
    for (name, snap) in fixtures() {
        let n = snap.device_traces[0].len();
        for cut in [1, n / 5, n / 3, n / 2, n - n / 10] {
            let mut s = snap.clone();
            s.device_traces[0].drop_front(cut);
            check(&s, &format!("{name} without its first {cut} entries"));
        }
    }
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n.max(1) as u64) as usize
    }
}

/// Damaged copies per fixture (`ORACLE_ROUNDS` overrides, for soak runs).
fn rounds() -> usize {
    std::env::var("ORACLE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

#[test]
fn equals_the_first_timeline_on_damaged_traces() {
    let rounds = rounds();
    let mut rng = Rng(7);
    for (name, snap) in fixtures() {
        for round in 0..rounds {
            let mut s = snap.clone();
            let mut v: Vec<_> = s.device_traces[0].iter().collect();
            let start = rng.below(v.len() / 2);
            v.drain(..start);
            for _ in 0..1 + rng.below(v.len() / 10 + 1) {
                let i = rng.below(v.len());
                match rng.below(6) {
                    0 => {
                        v.remove(i);
                    }
                    1 => {
                        let e = v[i];
                        v.insert(rng.below(v.len()), e);
                    }
                    2 => {
                        let j = rng.below(v.len());
                        v.swap(i, j);
                    }
                    3 => {
                        // An address moved inside its block.
                        v[i].addr += 512 * (1 + rng.below(4)) as u64;
                    }
                    4 => {
                        // A size changed.
                        v[i].size = v[i].size / 2 + 512 * rng.below(8) as u64;
                    }
                    _ => {
                        // Memory released or mapped where it should not be.
                        let mut e = v[i];
                        e.action = Some(
                            [
                                TraceAction::SegmentFree,
                                TraceAction::SegmentUnmap,
                                TraceAction::SegmentAlloc,
                                TraceAction::SegmentMap,
                            ][rng.below(4)],
                        );
                        e.size = (2 << 20) * (1 + rng.below(3)) as u64;
                        v.insert(i, e);
                    }
                }
            }
            s.device_traces[0] = v.into_iter().collect();
            check(&s, &format!("{name}, damaged copy {round} (start {start})"));
        }
    }
}

// ----- the first implementation, verbatim but for the new trace API -----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Free,
    Alloc(usize),
    Pending(usize),
}

#[derive(Debug, Clone, Copy)]
struct Blk {
    size: u64,
    st: St,
    seg: u32,
}

struct Sim {
    rounder: CachingAllocator,
    max_split: u64,
    expandable: bool,
    blocks: BTreeMap<u64, Blk>,
    seg_expandable: Vec<bool>,
    /// The trace's allocations not yet freed, by address.
    open: std::collections::HashMap<u64, usize>,
    truncated: Option<String>,
}

impl Sim {
    fn new(cfg: AllocatorConfig) -> Sim {
        Sim {
            max_split: cfg.max_split_size,
            expandable: cfg.expandable_segments,
            rounder: CachingAllocator::new(cfg),
            blocks: BTreeMap::new(),
            seg_expandable: Vec::new(),
            open: std::collections::HashMap::new(),
            truncated: None,
        }
    }

    fn mark_truncated(&mut self, i: usize, why: impl FnOnce() -> String) {
        if self.truncated.is_none() {
            self.truncated = Some(format!("trace entry {i}: {}", why()));
        }
    }

    fn containing(&self, addr: u64) -> Option<(u64, Blk)> {
        let (&a, &b) = self.blocks.range(..=addr).next_back()?;
        (addr < a + b.size).then_some((a, b))
    }

    fn new_seg(&mut self, expandable: bool) -> u32 {
        self.seg_expandable.push(expandable);
        (self.seg_expandable.len() - 1) as u32
    }

    /// Merge the free block at `addr` with free neighbours of its segment.
    fn merge(&mut self, mut addr: u64) {
        let Some(mut b) = self.blocks.get(&addr).copied() else {
            return;
        };
        if let Some((&pa, &pb)) = self.blocks.range(..addr).next_back() {
            if pa + pb.size == addr && pb.seg == b.seg && pb.st == St::Free {
                self.blocks.remove(&addr);
                b.size += pb.size;
                addr = pa;
            }
        }
        if let Some(nb) = self.blocks.get(&(addr + b.size)).copied() {
            if nb.seg == b.seg && nb.st == St::Free {
                self.blocks.remove(&(addr + b.size));
                b.size += nb.size;
            }
        }
        self.blocks.insert(addr, b);
    }

    /// Remove `[addr, addr + size)` (segment free / unmap); returns whether
    /// any known block was there.
    fn remove_range(&mut self, addr: u64, size: u64) -> bool {
        let end = addr + size;
        let mut found = false;
        if let Some((a, b)) = self.containing(addr) {
            if a < addr {
                // Trim a block that starts before the range.
                self.blocks.insert(
                    a,
                    Blk {
                        size: addr - a,
                        ..b
                    },
                );
                if a + b.size > end {
                    self.blocks.insert(
                        end,
                        Blk {
                            size: a + b.size - end,
                            ..b
                        },
                    );
                }
                found = true;
            }
        }
        let inside: Vec<u64> = self.blocks.range(addr..end).map(|(&a, _)| a).collect();
        for a in inside {
            found = true;
            if let Some(b) = self.blocks.remove(&a) {
                if a + b.size > end {
                    self.blocks.insert(
                        end,
                        Blk {
                            size: a + b.size - end,
                            ..b
                        },
                    );
                }
            }
        }
        found
    }

    fn layout(&self) -> Layout {
        let mut l = Layout::default();
        let mut by_seg: BTreeMap<u32, (bool, u64, u64, u64)> = BTreeMap::new();
        for b in self.blocks.values() {
            let e = by_seg.entry(b.seg).or_default();
            e.1 += b.size;
            if b.st == St::Free {
                e.2 += b.size;
                e.3 += 1;
                l.largest_free_block = l.largest_free_block.max(b.size);
            } else {
                e.0 = true;
            }
        }
        for (active, _total, free, nfree) in by_seg.into_values() {
            if active {
                l.inactive_split_bytes += free;
                l.inactive_split_blocks += nfree;
            } else {
                l.releasable_bytes += free;
            }
        }
        l
    }
}

type RunOut = (
    Vec<Allocation>,
    Vec<(i64, i64, i64)>,
    Vec<(usize, u64, Option<u64>, StackId)>,
    Sim,
    Option<Layout>,
);

fn run(trace: &Trace, cfg: &AllocatorConfig, stop: Option<usize>) -> RunOut {
    let mut sim = Sim::new(cfg.clone());
    let mut allocs: Vec<Allocation> = Vec::new();
    let mut deltas = Vec::with_capacity(if stop.is_some() { 0 } else { trace.len() });
    let mut ooms = Vec::new();
    // Pending frees of blocks allocated before the trace: addr -> size.
    let mut pre_pending: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, e) in trace.iter().enumerate() {
        let e = &e;
        let (mut da, mut dac, mut dr) = (0i64, 0i64, 0i64);
        match e.action {
            Some(TraceAction::Alloc) => {
                let r = sim.rounder.round_size(e.size);
                let mut exact = true;
                let size = match sim.containing(e.addr) {
                    Some((a, b)) if a == e.addr && b.st == St::Free && b.size >= r => {
                        let rem = b.size - r;
                        let small = r <= SMALL_SIZE;
                        let split = if small || sim.expandable || sim.seg_expandable[b.seg as usize]
                        {
                            rem >= MIN_BLOCK_SIZE
                        } else {
                            r < sim.max_split && rem > SMALL_SIZE
                        };
                        let size = if split { r } else { b.size };
                        if split {
                            sim.blocks.insert(
                                a + r,
                                Blk {
                                    size: rem,
                                    st: St::Free,
                                    seg: b.seg,
                                },
                            );
                        }
                        sim.blocks.insert(
                            a,
                            Blk {
                                size,
                                st: St::Alloc(allocs.len()),
                                seg: b.seg,
                            },
                        );
                        size
                    }
                    found => {
                        exact = false;
                        if found.is_none() {
                            sim.mark_truncated(i, || {
                                format!(
                                    "alloc at {:#x} lies in a segment the trace never created",
                                    e.addr
                                )
                            });
                        }
                        r
                    }
                };
                allocs.push(Allocation {
                    addr: e.addr,
                    size,
                    requested: e.size,
                    stream: e.stream,
                    start: Some(i),
                    end: None,
                    stack: e.frames,
                    time_us: e.time_us,
                    exact,
                });
                if !exact {
                    // Track it by address only.
                    let seg = match sim.containing(e.addr) {
                        Some((_, b)) => b.seg,
                        None => sim.new_seg(false),
                    };
                    sim.blocks.insert(
                        e.addr,
                        Blk {
                            size,
                            st: St::Alloc(allocs.len() - 1),
                            seg,
                        },
                    );
                }
                sim.open.insert(e.addr, allocs.len() - 1);
                da += size as i64;
                dac += size as i64;
            }
            Some(TraceAction::FreeRequested) => match sim.blocks.get(&e.addr).copied() {
                Some(Blk {
                    st: St::Alloc(k),
                    size,
                    seg,
                }) => {
                    allocs[k].end = Some(i);
                    sim.open.remove(&e.addr);
                    da -= size as i64;
                    sim.blocks.insert(
                        e.addr,
                        Blk {
                            size,
                            st: St::Pending(k),
                            seg,
                        },
                    );
                }
                _ if sim.open.contains_key(&e.addr) => {
                    let k = sim.open.remove(&e.addr).unwrap();
                    allocs[k].end = Some(i);
                    pre_pending.insert(e.addr, allocs[k].size);
                    da -= allocs[k].size as i64;
                }
                _ => {
                    sim.mark_truncated(i, || {
                        format!("free of {:#x}, which the trace never allocated", e.addr)
                    });
                    let size = sim.rounder.round_size(e.size);
                    allocs.push(Allocation {
                        addr: e.addr,
                        size,
                        requested: e.size,
                        stream: e.stream,
                        start: None,
                        end: Some(i),
                        stack: e.frames,
                        time_us: None,
                        exact: false,
                    });
                    pre_pending.insert(e.addr, size);
                    da -= size as i64;
                }
            },
            Some(TraceAction::FreeCompleted) => match sim.blocks.get(&e.addr).copied() {
                Some(Blk {
                    st: St::Pending(_),
                    size,
                    seg,
                }) => {
                    dac -= size as i64;
                    sim.blocks.insert(
                        e.addr,
                        Blk {
                            size,
                            st: St::Free,
                            seg,
                        },
                    );
                    sim.merge(e.addr);
                }
                _ => {
                    if let Some(size) = pre_pending.remove(&e.addr) {
                        dac -= size as i64;
                    }
                }
            },
            Some(TraceAction::SegmentAlloc | TraceAction::SegmentMap) => {
                let expandable = e.action == Some(TraceAction::SegmentMap);
                let seg = match sim.blocks.range(..e.addr).next_back() {
                    Some((&a, b)) if expandable && a + b.size == e.addr => b.seg,
                    _ => sim.new_seg(expandable),
                };
                sim.blocks.insert(
                    e.addr,
                    Blk {
                        size: e.size,
                        st: St::Free,
                        seg,
                    },
                );
                sim.merge(e.addr);
                dr += e.size as i64;
            }
            Some(TraceAction::SegmentFree | TraceAction::SegmentUnmap) => {
                if !sim.remove_range(e.addr, e.size) {
                    sim.mark_truncated(i, || {
                        format!(
                            "{} of {:#x}, which the trace never mapped",
                            e.action_str().unwrap_or("segment_free"),
                            e.addr
                        )
                    });
                }
                dr -= e.size as i64;
            }
            Some(TraceAction::Oom) => ooms.push((i, e.size, e.device_free, e.frames)),
            Some(TraceAction::Snapshot) | None => {}
        }
        if stop.is_some() {
            if stop == Some(i) {
                let layout = (sim.truncated.is_none()).then(|| sim.layout());
                return (allocs, deltas, ooms, sim, layout);
            }
        } else {
            deltas.push((da, dac, dr));
        }
    }
    (allocs, deltas, ooms, sim, None)
}

fn assemble(
    snap: &Snapshot,
    device: usize,
    trace: &Trace,
    mut allocs: Vec<Allocation>,
    deltas: Vec<(i64, i64, i64)>,
    ooms_raw: Vec<(usize, u64, Option<u64>, StackId)>,
    mut sim: Sim,
) -> OldTimeline {
    // Allocations alive at the end that the trace never allocated.
    let mut pre: Vec<Allocation> = Vec::new();
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        let mut addr = s.address;
        if sim.containing(s.address).is_none() && !trace.is_empty() {
            sim.mark_truncated(trace.len(), || {
                format!(
                    "segment {:#x} ({} bytes) exists at the end but the trace never created it",
                    s.address, s.total_size
                )
            });
        }
        for b in &s.blocks {
            let a = b.address.unwrap_or(addr);
            addr = a + b.size;
            if b.state != BlockState::ActiveAllocated {
                continue;
            }
            let known = matches!(
                sim.blocks.get(&a),
                Some(Blk {
                    st: St::Alloc(_),
                    ..
                })
            );
            if !known {
                pre.push(Allocation {
                    addr: a,
                    size: b.size,
                    requested: b.requested_size,
                    stream: s.stream,
                    start: None,
                    end: None,
                    stack: b.frames,
                    time_us: None,
                    exact: true,
                });
            }
        }
    }
    if !pre.is_empty() && !trace.is_empty() {
        sim.mark_truncated(0, || {
            format!(
                "{} block(s) allocated at the end were never allocated in the trace",
                pre.len()
            )
        });
    }
    let estimated_sizes = allocs.iter().filter(|a| !a.exact).count();
    pre.append(&mut allocs);
    let allocs = pre;

    let (fa, fac, fr) = timeline::final_counters(snap, device);
    let (na, nac, nr) = deltas
        .iter()
        .fold((0i64, 0i64, 0i64), |s, d| (s.0 + d.0, s.1 + d.1, s.2 + d.2));
    let baseline = if sim.truncated.is_some() {
        (
            (fa as i64 - na).max(0),
            (fac as i64 - nac).max(0),
            (fr as i64 - nr).max(0),
        )
    } else {
        (0, 0, 0)
    };
    let n = deltas.len();
    let (mut allocated, mut active, mut reserved) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut a, mut ac, mut r) = baseline;
    for (da, dac, dr) in deltas {
        a += da;
        ac += dac;
        r += dr;
        allocated.push(a.max(0) as u64);
        active.push(ac.max(0) as u64);
        reserved.push(r.max(0) as u64);
    }
    let before = |v: &Vec<u64>, i: usize, b: i64| {
        if i == 0 {
            b.max(0) as u64
        } else {
            v[i - 1]
        }
    };
    let ooms = ooms_raw
        .into_iter()
        .map(|(i, requested, device_free, stack)| OomEvent {
            trace_index: i,
            requested,
            device_free,
            allocated: before(&allocated, i, baseline.0),
            reserved: before(&reserved, i, baseline.2),
            stack,
        })
        .collect();
    OldTimeline {
        allocated,
        active,
        reserved,
        baseline: (
            baseline.0.max(0) as u64,
            baseline.1.max(0) as u64,
            baseline.2.max(0) as u64,
        ),
        allocations: allocs,
        ooms,
        truncated: sim.truncated,
        estimated_sizes,
        layout_at_peak: None,
    }
}

/// The pass made while the file is read ([`timeline::early_pass`]), under
/// `cfg` whatever the snapshot's settings, and the snapshot.
fn read_early(
    rel: &str,
    cfg: Option<AllocatorConfig>,
) -> (Snapshot, Option<(usize, timeline::EarlyPass)>) {
    let p = vramscope_testkit::xz::fixture_file(rel);
    vramscope_snapshot::read_file_parallel_early(&p, 3, move |t: vramscope_snapshot::EarlyTrace| {
        let cfg = cfg.unwrap_or_else(|| {
            let s = Snapshot {
                allocator_settings: t.allocator_settings().cloned(),
                ..Default::default()
            };
            vramscope_replay::from_snapshot::config(&s).0
        });
        timeline::early_pass(t, cfg, 300)
    })
    .expect("decoded in parallel")
    .expect("read")
}

#[test]
fn the_pass_made_while_reading_is_the_timeline_s_own() {
    for rel in [
        "fixtures/snapshot_real/nanogpt_2streams_oom_h200.pickle.xz",
        "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
    ] {
        let (snap, early) = read_early(rel, None);
        assert!(early.is_some(), "{rel}: no pass");
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        let want = timeline::build(&snap, 0, &cfg, 300);
        assert!(!want.ooms.is_empty(), "{rel}: its out-of-memory events");
        let got = timeline::build_window_early(&snap, 0, &cfg, 300, None, early);
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{rel}");
    }
}

#[test]
fn a_pass_under_other_settings_or_points_is_not_taken() {
    // the expandable snapshot's pass made as if its segments were not
    // expandable: it differs, and is made again under the right settings
    let rel = "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz";
    let (snap, early) = read_early(rel, Some(AllocatorConfig::default()));
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    assert!(cfg.expandable_segments);
    let want = timeline::build(&snap, 0, &cfg, 300);
    let got = timeline::build_window_early(&snap, 0, &cfg, 300, None, early);
    assert_eq!(format!("{got:?}"), format!("{want:?}"));
    let (_, early) = read_early(rel, Some(AllocatorConfig::default()));
    let wrong =
        timeline::build_window_early(&snap, 0, &AllocatorConfig::default(), 300, None, early);
    assert_ne!(
        format!("{wrong:?}"),
        format!("{want:?}"),
        "the settings matter"
    );
    // other points, another device, a window
    for (points, device, window) in [(200, 0, None), (300, 1, None), (300, 0, Some(0..100))] {
        let (_, early) = read_early(rel, None);
        let want = timeline::build_window(&snap, device, &cfg, points, window.clone());
        let got = timeline::build_window_early(&snap, device, &cfg, points, window, early);
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
}
