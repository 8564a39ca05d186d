//! The timeline: allocated, active and reserved bytes after every trace
//! entry, and every allocation's lifetime.
//!
//! A trace records the *requested* size of each allocation, but PyTorch's
//! counters (`allocated_bytes`, `active_bytes`) count the *block* the
//! allocator handed out: the size rounded (`round_size`, including
//! `roundup_power2_divisions`) or, when the rest of the cached block was too
//! small to split off, the whole cached block. The timeline therefore follows
//! the real addresses through the segments the trace itself creates and
//! splits and merges blocks with the caching allocator's rules
//! (`should_split`, merging on `free_block`), so the sizes it counts are the
//! GPU's sizes, not estimates.
//!
//! When the trace does not start at the first allocation (a ring buffer
//! smaller than the run), memory allocated before the trace cannot be
//! followed: its size is taken from the final segments where it survives,
//! estimated with `round_size` where it is freed inside the trace, and the
//! counters start from a baseline reconstructed from the final segments.
//! [`Timeline::truncated`] says so.

use std::collections::BTreeMap;

use vramscope_alloc::{AllocatorConfig, CachingAllocator, MIN_BLOCK_SIZE, SMALL_SIZE};
use vramscope_snapshot::{Action, BlockState, Snapshot, StackId};

/// One allocation (a block handed to the program) and its lifetime.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Address.
    pub addr: u64,
    /// Block size, as the allocator counts it.
    pub size: u64,
    /// Size the program asked for.
    pub requested: u64,
    /// Stream.
    pub stream: u64,
    /// Trace index of its `alloc`; `None` when allocated before the trace.
    pub start: Option<usize>,
    /// Trace index of its `free_requested`; `None` when alive at the end.
    pub end: Option<usize>,
    /// Where it was allocated.
    pub stack: StackId,
    /// Time of the `alloc`, when recorded.
    pub time_us: Option<i64>,
    /// Whether `size` is known exactly (false: estimated with `round_size`).
    pub exact: bool,
}

impl Allocation {
    /// Whether it is allocated right after trace entry `i`.
    pub fn live_after(&self, i: usize) -> bool {
        self.start.is_none_or(|s| s <= i) && self.end.is_none_or(|e| e > i)
    }
}

/// An `oom` trace entry and the state just before it.
#[derive(Debug, Clone, PartialEq)]
pub struct OomEvent {
    /// Trace index.
    pub trace_index: usize,
    /// Bytes requested.
    pub requested: u64,
    /// Free device memory the entry reported.
    pub device_free: Option<u64>,
    /// Allocated bytes just before.
    pub allocated: u64,
    /// Reserved bytes just before.
    pub reserved: u64,
    /// Stack of the failing allocation.
    pub stack: StackId,
}

/// Free-space layout of the segments at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Bytes in inactive blocks of segments that also hold active blocks
    /// (cached memory `empty_cache()` cannot release).
    pub inactive_split_bytes: u64,
    /// Number of such blocks.
    pub inactive_split_blocks: u64,
    /// The largest inactive block.
    pub largest_free_block: u64,
    /// Bytes in segments with no active block (what `empty_cache()` releases).
    pub releasable_bytes: u64,
}

/// The whole timeline of one device.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Allocated bytes after each trace entry.
    pub allocated: Vec<u64>,
    /// Active bytes (allocated or pending free) after each trace entry.
    pub active: Vec<u64>,
    /// Reserved bytes after each trace entry.
    pub reserved: Vec<u64>,
    /// Counters before the first entry: (allocated, active, reserved).
    pub baseline: (u64, u64, u64),
    /// Every allocation, in order of allocation (those from before the
    /// trace first).
    pub allocations: Vec<Allocation>,
    /// Out-of-memory events.
    pub ooms: Vec<OomEvent>,
    /// Why the trace is known not to start at the first allocation.
    pub truncated: Option<String>,
    /// Allocations whose size had to be estimated.
    pub estimated_sizes: usize,
    /// Free-space layout at the peak of allocated memory (`None` when the
    /// peak lies before the trace or the layout is unknown).
    pub layout_at_peak: Option<Layout>,
}

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

/// The final counters a device's segments show: (allocated, active, reserved).
pub fn final_counters(snap: &Snapshot, device: usize) -> (u64, u64, u64) {
    let (mut a, mut ac, mut r) = (0, 0, 0);
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        r += s.total_size;
        for b in &s.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    a += b.size;
                    ac += b.size;
                }
                BlockState::ActivePendingFree => ac += b.size,
                _ => {}
            }
        }
    }
    (a, ac, r)
}

/// The free-space layout the final segments show.
pub fn final_layout(snap: &Snapshot, device: usize) -> Layout {
    let mut l = Layout::default();
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        let active = s
            .blocks
            .iter()
            .any(|b| !matches!(b.state, BlockState::Inactive));
        for b in s.blocks.iter().filter(|b| b.state == BlockState::Inactive) {
            l.largest_free_block = l.largest_free_block.max(b.size);
            if active {
                l.inactive_split_bytes += b.size;
                l.inactive_split_blocks += 1;
            }
        }
        if !active {
            l.releasable_bytes += s.total_size;
        }
    }
    l
}

/// Build the timeline of `device`'s trace.
pub fn build(snap: &Snapshot, device: usize, cfg: &AllocatorConfig) -> Timeline {
    let empty = Vec::new();
    let trace = snap.device_traces.get(device).unwrap_or(&empty);
    let (allocs, deltas, ooms_raw, sim, peak_layout) = run(trace, cfg, None);
    let mut t = assemble(snap, device, trace, allocs, deltas, ooms_raw, sim);
    // Second pass, up to the peak, for the layout there.
    if let Some(p) = peak_index(&t.allocated) {
        let (_, _, _, _, layout) = run(trace, cfg, Some(p));
        t.layout_at_peak = layout;
    }
    let _ = peak_layout;
    t
}

/// Index of the (first) maximum.
pub fn peak_index(v: &[u64]) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, &x) in v.iter().enumerate() {
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

type RunOut = (
    Vec<Allocation>,
    Vec<(i64, i64, i64)>,
    Vec<(usize, u64, Option<u64>, StackId)>,
    Sim,
    Option<Layout>,
);

fn run(
    trace: &[vramscope_snapshot::TraceEntry],
    cfg: &AllocatorConfig,
    stop: Option<usize>,
) -> RunOut {
    let mut sim = Sim::new(cfg.clone());
    let mut allocs: Vec<Allocation> = Vec::new();
    let mut deltas = Vec::with_capacity(if stop.is_some() { 0 } else { trace.len() });
    let mut ooms = Vec::new();
    // Pending frees of blocks allocated before the trace: addr -> size.
    let mut pre_pending: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, e) in trace.iter().enumerate() {
        let (mut da, mut dac, mut dr) = (0i64, 0i64, 0i64);
        match e.action {
            Action::Alloc => {
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
                da += size as i64;
                dac += size as i64;
            }
            Action::FreeRequested => match sim.blocks.get(&e.addr).copied() {
                Some(Blk {
                    st: St::Alloc(k),
                    size,
                    seg,
                }) => {
                    allocs[k].end = Some(i);
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
            Action::FreeCompleted => match sim.blocks.get(&e.addr).copied() {
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
            Action::SegmentAlloc | Action::SegmentMap => {
                let expandable = e.action == Action::SegmentMap;
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
            Action::SegmentFree | Action::SegmentUnmap => {
                if !sim.remove_range(e.addr, e.size) {
                    sim.mark_truncated(i, || {
                        format!(
                            "{} of {:#x}, which the trace never mapped",
                            e.action.name().unwrap_or("segment_free"),
                            e.addr
                        )
                    });
                }
                dr -= e.size as i64;
            }
            Action::Oom => ooms.push((i, e.size, e.device_free, e.frames)),
            Action::Snapshot | Action::Other(_) => {}
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
    trace: &[vramscope_snapshot::TraceEntry],
    mut allocs: Vec<Allocation>,
    deltas: Vec<(i64, i64, i64)>,
    ooms_raw: Vec<(usize, u64, Option<u64>, StackId)>,
    mut sim: Sim,
) -> Timeline {
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

    let (fa, fac, fr) = final_counters(snap, device);
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
    Timeline {
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
