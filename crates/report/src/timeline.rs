//! The timeline: allocated, active and reserved bytes along a trace, their
//! peaks, and every allocation's lifetime.
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
//!
//! # Cost
//! [`build`] streams over the trace once, keeping only the blocks alive in
//! the simulated segments (a hash map by address, each segment's blocks
//! linked in address order), the peaks, a downsampled curve and 16 bytes per
//! allocation ([`Life`]); the per-entry counters are never materialised. A
//! second, partial pass up to the peak gives the free-space layout there
//! (timed in `docs/performance.md`).
//!
//! The test `tests/timeline_oracle.rs` keeps a plain implementation (one
//! ordered map of all blocks, the counters after every entry) and checks
//! that this one computes the same on every fixture, truncated copies and
//! randomly damaged traces.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use vramscope_alloc::{AllocatorConfig, CachingAllocator, TraceAction, MIN_BLOCK_SIZE, SMALL_SIZE};
use vramscope_snapshot::{BlockState, Snapshot, StackId, Trace};

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

/// "No index" in a [`Life`].
const NONE: u32 = u32::MAX;

/// The lifetime of one allocation of the trace, 16 bytes; the rest of it
/// (address, stack, ...) is read back from the trace entry that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// Block size, as the allocator counts it.
    pub size: u64,
    start: u32,
    end: u32,
}

impl Life {
    /// Trace index of its `alloc` (`None`: allocated before the trace and
    /// freed inside it).
    pub fn start(&self) -> Option<usize> {
        (self.start != NONE).then_some(self.start as usize)
    }

    /// Trace index of its `free_requested` (`None`: alive at the end).
    pub fn end(&self) -> Option<usize> {
        (self.end != NONE).then_some(self.end as usize)
    }

    /// Whether it is allocated right after trace entry `i`.
    pub fn live_after(&self, i: usize) -> bool {
        self.start().is_none_or(|s| s <= i) && self.end().is_none_or(|e| e > i)
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

/// The peak of one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Peak {
    /// Trace index of its first maximum (`None` for an empty trace).
    pub index: Option<usize>,
    /// Its bytes (at least the baseline).
    pub bytes: u64,
}

/// One point of the downsampled curve: for a bucket of consecutive trace
/// entries, the maximum of each counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The entry with the bucket's (first) maximum of allocated bytes.
    pub trace_index: usize,
    /// Allocated bytes there.
    pub allocated: u64,
    /// The bucket's maximum of active bytes.
    pub active: u64,
    /// The bucket's maximum of reserved bytes.
    pub reserved: u64,
}

/// The timeline of one device.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Trace entries.
    pub entries: usize,
    /// Counters before the first entry: (allocated, active, reserved).
    pub baseline: (u64, u64, u64),
    /// Counters after the last entry (the baseline for an empty trace).
    pub last: (u64, u64, u64),
    /// Peak of allocated bytes.
    pub peak_allocated: Peak,
    /// Peak of active bytes.
    pub peak_active: Peak,
    /// Peak of reserved bytes.
    pub peak_reserved: Peak,
    /// (allocated, reserved) right after the peak of allocated bytes.
    pub at_peak: (u64, u64),
    /// The curve, downsampled to at most the number of points asked for.
    pub samples: Vec<Sample>,
    /// Out-of-memory events.
    pub ooms: Vec<OomEvent>,
    /// Why the trace is known not to start at the first allocation.
    pub truncated: Option<String>,
    /// Allocations whose size had to be estimated.
    pub estimated_sizes: usize,
    /// Free-space layout at the peak of allocated memory (`None` when the
    /// peak lies before the trace or the layout is unknown).
    pub layout_at_peak: Option<Layout>,
    /// Allocations alive at the end that the trace never allocated.
    pre: Vec<Allocation>,
    /// The trace's allocations, in trace order.
    lives: Vec<Life>,
    /// Indices into `lives` whose size is estimated (ascending).
    inexact: Vec<u32>,
}

impl Timeline {
    /// Number of allocations: those from before the trace that survive to
    /// the end first, then the trace's, in trace order.
    pub fn num_allocations(&self) -> usize {
        self.pre.len() + self.lives.len()
    }

    /// Allocation `k` (see [`Timeline::num_allocations`] for the order),
    /// read back from `trace`, the trace the timeline was built from.
    pub fn allocation(&self, trace: &Trace, k: usize) -> Option<Allocation> {
        if let Some(a) = self.pre.get(k) {
            return Some(a.clone());
        }
        let j = k - self.pre.len();
        let l = self.lives.get(j)?;
        let exact = self.inexact.binary_search(&(j as u32)).is_err();
        Some(match l.start() {
            Some(s) => {
                let e = trace.get(s)?;
                Allocation {
                    addr: e.addr,
                    size: l.size,
                    requested: e.size,
                    stream: e.stream,
                    start: Some(s),
                    end: l.end(),
                    stack: e.frames,
                    time_us: e.time_us,
                    exact,
                }
            }
            None => {
                // Allocated before the trace, freed inside it: what the
                // `free_requested` entry says.
                let e = trace.get(l.end()?)?;
                Allocation {
                    addr: e.addr,
                    size: l.size,
                    requested: e.size,
                    stream: e.stream,
                    start: None,
                    end: l.end(),
                    stack: e.frames,
                    time_us: None,
                    exact,
                }
            }
        })
    }

    /// Every allocation's (size, start, end), in the order of
    /// [`Timeline::allocation`], without touching the trace.
    pub fn lifetimes(&self) -> impl Iterator<Item = (u64, Option<usize>, Option<usize>)> + '_ {
        self.pre
            .iter()
            .map(|a| (a.size, a.start, a.end))
            .chain(self.lives.iter().map(|l| (l.size, l.start(), l.end())))
    }

    /// The allocations live right after trace entry `i` (all those alive
    /// from before the trace to its end when `i` is `None`), in order.
    pub fn live_after(&self, i: Option<usize>) -> Vec<usize> {
        self.lifetimes()
            .enumerate()
            .filter(|(_, (_, s, e))| match i {
                Some(i) => s.is_none_or(|s| s <= i) && e.is_none_or(|e| e > i),
                None => s.is_none() && e.is_none(),
            })
            .map(|(k, _)| k)
            .collect()
    }
}

// ----- the simulated segments -------------------------------------------------

/// A cheap hasher for addresses (one 128-bit multiply, folded).
#[derive(Default, Clone, Copy)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        let m = u128::from(n ^ 0x243f_6a88_85a3_08d3) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Free,
    Alloc(u32),
    Pending(u32),
}

/// A block of a simulated segment.
#[derive(Debug, Clone, Copy)]
struct Node {
    addr: u64,
    size: u64,
    st: St,
    seg: u32,
    /// Neighbours in the segment, in address order.
    prev: u32,
    next: u32,
}

#[derive(Debug, Clone, Copy)]
struct Seg {
    head: u32,
    tail: u32,
    expandable: bool,
}

/// The segments the trace creates, block by block, with the semantics of
/// one ordered map from block start to block: a block is found by its
/// start address (as the trace names them), and "the block before an
/// address" is the one with the greatest start below it.
///
/// While the trace is consistent (every `alloc` takes a free block the
/// trace created, segments never overlap), each segment keeps its blocks
/// linked in address order and the segments are indexed by their first
/// block: finding, splitting and merging a block costs a hash lookup and a
/// few pointer updates. At the first sign of a truncated or inconsistent
/// trace (a block followed by address only, a segment over known blocks, a
/// release of memory the trace never mapped) the sim also keeps every
/// block in one ordered map and answers from it from then on.
struct Sim {
    rounder: CachingAllocator,
    max_split: u64,
    expandable: bool,
    nodes: Vec<Node>,
    spare: Vec<u32>,
    at: AddrMap<u32>,
    segs: Vec<Seg>,
    /// First block's address → segment (while not `ordered`).
    seg_at: BTreeMap<u64, u32>,
    /// Every block by start, once the trace showed an inconsistency.
    ordered: Option<BTreeMap<u64, u32>>,
    truncated: Option<String>,
}

impl Sim {
    fn new(cfg: AllocatorConfig) -> Sim {
        Sim {
            max_split: cfg.max_split_size,
            expandable: cfg.expandable_segments,
            rounder: CachingAllocator::new(cfg),
            nodes: Vec::new(),
            spare: Vec::new(),
            at: AddrMap::default(),
            segs: Vec::new(),
            seg_at: BTreeMap::new(),
            ordered: None,
            truncated: None,
        }
    }

    fn mark_truncated(&mut self, i: usize, why: impl FnOnce() -> String) {
        if self.truncated.is_none() {
            self.truncated = Some(format!("trace entry {i}: {}", why()));
        }
    }

    /// From now on, keep every block in one ordered map.
    fn degrade(&mut self) {
        if self.ordered.is_none() {
            self.ordered = Some(self.at.iter().map(|(&a, &n)| (a, n)).collect());
            self.seg_at.clear();
        }
    }

    #[inline]
    fn node(&self, n: u32) -> &Node {
        &self.nodes[n as usize]
    }

    #[inline]
    fn node_mut(&mut self, n: u32) -> &mut Node {
        &mut self.nodes[n as usize]
    }

    fn new_seg(&mut self, expandable: bool) -> u32 {
        self.segs.push(Seg {
            head: NONE,
            tail: NONE,
            expandable,
        });
        (self.segs.len() - 1) as u32
    }

    /// The block with the greatest start at or below `addr` (below it
    /// when `strict`).
    fn pred(&self, addr: u64, strict: bool) -> Option<u32> {
        if let Some(o) = &self.ordered {
            let r = if strict {
                o.range(..addr).next_back()
            } else {
                o.range(..=addr).next_back()
            };
            return r.map(|(_, &n)| n);
        }
        // Segments are disjoint: the block is in the last segment starting
        // at or below `addr`.
        let (_, &s) = if strict {
            self.seg_at.range(..addr).next_back()?
        } else {
            self.seg_at.range(..=addr).next_back()?
        };
        let mut n = self.segs[s as usize].tail;
        while n != NONE {
            let b = self.node(n);
            if b.addr < addr || (!strict && b.addr == addr) {
                return Some(n);
            }
            n = b.prev;
        }
        None
    }

    /// The block containing `addr` (the one before it, if it reaches it).
    #[inline]
    fn containing(&self, addr: u64) -> Option<u32> {
        let n = match self.at.get(&addr) {
            Some(&n) => n,
            None => self.pred(addr, false)?,
        };
        let b = self.node(n);
        (addr < b.addr + b.size).then_some(n)
    }

    fn alloc_node(&mut self, b: Node) -> u32 {
        match self.spare.pop() {
            Some(n) => {
                self.nodes[n as usize] = b;
                n
            }
            None => {
                self.nodes.push(b);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Link block `n` (not yet linked) into its segment after block
    /// `after` (`NONE`: as its first block), and index it by address.
    fn link_after(&mut self, n: u32, after: u32) {
        let b = *self.node(n);
        let s = b.seg as usize;
        let next = if after == NONE {
            self.segs[s].head
        } else {
            self.node(after).next
        };
        {
            let m = self.node_mut(n);
            m.prev = after;
            m.next = next;
        }
        if after == NONE {
            if self.ordered.is_none() {
                if next != NONE {
                    let oa = self.node(next).addr;
                    self.seg_at.remove(&oa);
                }
                self.seg_at.insert(b.addr, b.seg);
            }
            self.segs[s].head = n;
        } else {
            self.node_mut(after).next = n;
        }
        if next == NONE {
            self.segs[s].tail = n;
        } else {
            self.node_mut(next).prev = n;
        }
        self.at.insert(b.addr, n);
        if let Some(o) = &mut self.ordered {
            o.insert(b.addr, n);
        }
    }

    /// Unlink block `n` from its segment and forget it.
    fn remove(&mut self, n: u32) {
        let b = *self.node(n);
        if self.at.get(&b.addr) == Some(&n) {
            self.at.remove(&b.addr);
            if let Some(o) = &mut self.ordered {
                o.remove(&b.addr);
            }
        }
        let s = b.seg as usize;
        if b.prev != NONE {
            self.node_mut(b.prev).next = b.next;
        } else {
            if self.ordered.is_none() {
                self.seg_at.remove(&b.addr);
                if b.next != NONE {
                    let na = self.node(b.next).addr;
                    self.seg_at.insert(na, b.seg);
                }
            }
            self.segs[s].head = b.next;
        }
        if b.next != NONE {
            self.node_mut(b.next).prev = b.prev;
        } else {
            self.segs[s].tail = b.prev;
        }
        self.spare.push(n);
    }

    /// Add a block, replacing any block that starts at the same address.
    fn put(&mut self, addr: u64, size: u64, st: St, seg: u32) -> u32 {
        if let Some(&old) = self.at.get(&addr) {
            self.remove(old);
        }
        let n = self.alloc_node(Node {
            addr,
            size,
            st,
            seg,
            prev: NONE,
            next: NONE,
        });
        let mut after = self.segs[seg as usize].tail;
        while after != NONE && self.node(after).addr > addr {
            after = self.node(after).prev;
        }
        self.link_after(n, after);
        n
    }

    /// Split free block `n` (at least `r` bytes): its first `r` bytes stay
    /// in `n`, the rest becomes a free block right after it.
    #[inline]
    fn split(&mut self, n: u32, r: u64) {
        let b = *self.node(n);
        let rest_addr = b.addr + r;
        self.node_mut(n).size = r;
        if self.ordered.is_some()
            || self.at.contains_key(&rest_addr)
            || (b.next != NONE && self.node(b.next).addr < rest_addr)
        {
            // Blocks followed by address may overlap: the general path.
            self.put(rest_addr, b.size - r, St::Free, b.seg);
            return;
        }
        let m = self.alloc_node(Node {
            addr: rest_addr,
            size: b.size - r,
            st: St::Free,
            seg: b.seg,
            prev: NONE,
            next: NONE,
        });
        self.link_after(m, n);
    }

    /// Merge free block `n` with the free blocks right before and after
    /// it in its segment (`free_block` → `try_merge_blocks`).
    #[inline]
    fn merge(&mut self, mut n: u32) {
        let b = *self.node(n);
        // The block before it: its predecessor in the segment, which is
        // the block before it in memory while segments are disjoint.
        let prev = if self.ordered.is_some() {
            self.pred(b.addr, true)
        } else {
            (b.prev != NONE).then_some(b.prev)
        };
        if let Some(p) = prev {
            let pb = *self.node(p);
            if pb.addr + pb.size == b.addr && pb.seg == b.seg && pb.st == St::Free {
                self.remove(n);
                self.node_mut(p).size += b.size;
                n = p;
            }
        }
        let b = *self.node(n);
        if let Some(&q) = self.at.get(&(b.addr + b.size)) {
            let qb = *self.node(q);
            if qb.seg == b.seg && qb.st == St::Free {
                self.remove(q);
                self.node_mut(n).size += qb.size;
            }
        }
    }

    /// Remove `[addr, addr + size)` (segment free / unmap); returns whether
    /// any known block was there.
    fn remove_range(&mut self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        let mut found = false;
        if let Some(c) = self.containing(addr) {
            let b = *self.node(c);
            if b.addr < addr {
                // Trim a block that starts before the range.
                self.node_mut(c).size = addr - b.addr;
                if b.addr + b.size > end {
                    self.put(end, b.addr + b.size - end, b.st, b.seg);
                }
                found = true;
            }
        }
        // The blocks starting inside the range, in address order.
        let inside: Vec<(u64, u32)> = match &self.ordered {
            Some(o) => o.range(addr..end).map(|(&a, &n)| (a, n)).collect(),
            None => {
                let mut v = Vec::new();
                let segs: Vec<u32> = self
                    .seg_at
                    .range(..end)
                    .rev()
                    .map(|(_, &s)| s)
                    .take_while(|&s| {
                        let t = self.segs[s as usize].tail;
                        t != NONE && self.node(t).addr >= addr
                    })
                    .collect();
                for s in segs {
                    let mut n = self.segs[s as usize].tail;
                    while n != NONE {
                        let b = self.node(n);
                        if b.addr < addr {
                            break;
                        }
                        if b.addr < end {
                            v.push((b.addr, n));
                        }
                        n = b.prev;
                    }
                }
                v.sort_unstable();
                v
            }
        };
        for (a, n) in inside {
            // (`put` below only adds blocks at `end`, outside the range.)
            let b = *self.node(n);
            found = true;
            self.remove(n);
            if a + b.size > end {
                self.put(end, a + b.size - end, b.st, b.seg);
            }
        }
        found
    }

    fn layout(&self) -> Layout {
        let mut l = Layout::default();
        // Per segment: (has an active block, free bytes, free blocks).
        let mut per = vec![(false, 0u64, 0u64); self.segs.len()];
        for s in &self.segs {
            let mut n = s.head;
            while n != NONE {
                let b = self.node(n);
                let e = &mut per[b.seg as usize];
                if b.st == St::Free {
                    e.1 += b.size;
                    e.2 += 1;
                    l.largest_free_block = l.largest_free_block.max(b.size);
                } else {
                    e.0 = true;
                }
                n = b.next;
            }
        }
        for (active, free, nfree) in per {
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

// ----- the passes ---------------------------------------------------------------

/// Running counters, relative to the (not yet known) baseline.
#[derive(Clone, Copy, Default)]
struct Cum {
    a: i64,
    ac: i64,
    r: i64,
}

/// First maximum of a relative counter.
#[derive(Clone, Copy)]
struct Max {
    at: usize,
    v: i64,
}

impl Max {
    const NONE: Max = Max {
        at: usize::MAX,
        v: i64::MIN,
    };
    #[inline]
    fn see(&mut self, i: usize, v: i64) {
        if v > self.v {
            *self = Max { at: i, v };
        }
    }
}

#[derive(Clone, Copy)]
struct Bucket {
    start: usize,
    a: Max,
    ac: i64,
    r: i64,
}

/// What the full pass gathers.
struct Pass {
    sim: Sim,
    lives: Vec<Life>,
    inexact: Vec<u32>,
    /// (index, requested, device_free, stack, counters before).
    ooms: Vec<(usize, u64, Option<u64>, StackId, Cum)>,
    cum: Cum,
    first: Cum,
    max_a: Max,
    max_ac: Max,
    max_r: Max,
    /// Relative reserved at the first maximum of allocated.
    r_at_max_a: i64,
    buckets: Vec<Bucket>,
}

/// Convert a trace index to the `u32` a [`Life`] stores (traces hold fewer
/// than `u32::MAX` entries).
#[inline]
fn ix(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(NONE - 1)
}

/// Follow the trace through the simulated segments. With `stop`, only the
/// blocks are followed, up to entry `stop`, and the sim is returned there.
fn run(
    trace: &Trace,
    cfg: &AllocatorConfig,
    stop: Option<usize>,
    bucket: usize,
    window: &std::ops::Range<usize>,
) -> Pass {
    let record = stop.is_none();
    // One `Life` per `alloc` (and per `free_requested` of memory allocated
    // before the trace, rare): reserve them at once (growing a big Vec can
    // briefly need twice its size). One per entry bounds them without a
    // pass to count; the pages never written are never touched.
    let lives = if record {
        Vec::with_capacity(trace.len())
    } else {
        Vec::new()
    };
    let mut p = Pass {
        sim: Sim::new(cfg.clone()),
        lives,
        inexact: Vec::new(),
        ooms: Vec::new(),
        cum: Cum::default(),
        first: Cum::default(),
        max_a: Max::NONE,
        max_ac: Max::NONE,
        max_r: Max::NONE,
        r_at_max_a: 0,
        buckets: Vec::new(),
    };
    let sim = &mut p.sim;
    // Pending frees of blocks allocated before the trace: addr -> size.
    let mut pre_pending: AddrMap<u64> = AddrMap::default();
    // The trace's allocations not yet freed, by address (recorded passes).
    let mut open: AddrMap<u32> = AddrMap::default();
    let bucket = bucket.max(1);
    for (i, e) in trace.iter().enumerate() {
        let (mut da, mut dac, mut dr) = (0i64, 0i64, 0i64);
        match e.action {
            Some(TraceAction::Alloc) => {
                let r = sim.rounder.round_size(e.size);
                let k = p.lives.len() as u32;
                let found = sim.containing(e.addr);
                let exact = match found {
                    Some(n) => {
                        let b = *sim.node(n);
                        b.addr == e.addr && b.st == St::Free && b.size >= r
                    }
                    None => false,
                };
                let size = if exact {
                    let n = found.unwrap_or(NONE);
                    let b = *sim.node(n);
                    let rem = b.size - r;
                    let small = r <= SMALL_SIZE;
                    let split = if small || sim.expandable || sim.segs[b.seg as usize].expandable {
                        rem >= MIN_BLOCK_SIZE
                    } else {
                        r < sim.max_split && rem > SMALL_SIZE
                    };
                    if split {
                        sim.split(n, r);
                    }
                    sim.node_mut(n).st = St::Alloc(k);
                    if split {
                        r
                    } else {
                        b.size
                    }
                } else {
                    if found.is_none() {
                        sim.mark_truncated(i, || {
                            format!(
                                "alloc at {:#x} lies in a segment the trace never created",
                                e.addr
                            )
                        });
                    }
                    // Track it by address only.
                    sim.degrade();
                    let seg = match found {
                        Some(n) => sim.node(n).seg,
                        None => sim.new_seg(false),
                    };
                    sim.put(e.addr, r, St::Alloc(k), seg);
                    r
                };
                if record {
                    open.insert(e.addr, k);
                    if !exact {
                        p.inexact.push(k);
                    }
                    p.lives.push(Life {
                        size,
                        start: ix(i),
                        end: NONE,
                    });
                }
                da += size as i64;
                dac += size as i64;
            }
            Some(TraceAction::FreeRequested) => {
                let n = sim.at.get(&e.addr).copied();
                match n.map(|n| *sim.node(n)) {
                    Some(Node {
                        st: St::Alloc(k),
                        size,
                        ..
                    }) => {
                        if let Some(l) = p.lives.get_mut(k as usize) {
                            l.end = ix(i);
                        }
                        if record {
                            open.remove(&e.addr);
                        }
                        da -= size as i64;
                        sim.node_mut(n.unwrap_or(NONE)).st = St::Pending(k);
                    }
                    _ if open.contains_key(&e.addr) => {
                        // allocated in the trace, its block lost by the sim
                        // (blocks followed by address only overlap): the
                        // free at its address still ends it
                        let k = open.remove(&e.addr).unwrap_or(NONE);
                        let size = match p.lives.get_mut(k as usize) {
                            Some(l) => {
                                l.end = ix(i);
                                l.size
                            }
                            None => sim.rounder.round_size(e.size),
                        };
                        pre_pending.insert(e.addr, size);
                        da -= size as i64;
                    }
                    _ => {
                        sim.mark_truncated(i, || {
                            format!("free of {:#x}, which the trace never allocated", e.addr)
                        });
                        let size = sim.rounder.round_size(e.size);
                        if record {
                            p.inexact.push(p.lives.len() as u32);
                            p.lives.push(Life {
                                size,
                                start: NONE,
                                end: ix(i),
                            });
                        }
                        pre_pending.insert(e.addr, size);
                        da -= size as i64;
                    }
                }
            }
            Some(TraceAction::FreeCompleted) => {
                let n = sim.at.get(&e.addr).copied();
                match n.map(|n| *sim.node(n)) {
                    Some(Node {
                        st: St::Pending(_),
                        size,
                        ..
                    }) => {
                        let n = n.unwrap_or(NONE);
                        dac -= size as i64;
                        sim.node_mut(n).st = St::Free;
                        sim.merge(n);
                    }
                    _ => {
                        if let Some(size) = pre_pending.remove(&e.addr) {
                            dac -= size as i64;
                        }
                    }
                }
            }
            Some(a @ (TraceAction::SegmentAlloc | TraceAction::SegmentMap)) => {
                let expandable = a == TraceAction::SegmentMap;
                let joined = if expandable {
                    sim.pred(e.addr, true).and_then(|n| {
                        let b = sim.node(n);
                        (b.addr + b.size == e.addr).then_some(b.seg)
                    })
                } else {
                    None
                };
                if sim.ordered.is_none() {
                    // Segments stay disjoint only if nothing known starts
                    // in the new range and it fills no hole of another.
                    let end = e.addr.saturating_add(e.size);
                    let p = sim.pred(e.addr, true);
                    let clean = sim.pred(end, true) == p
                        && p.is_none_or(|p| {
                            let b = sim.node(p);
                            b.addr + b.size <= e.addr && (joined == Some(b.seg) || b.next == NONE)
                        });
                    if !clean {
                        sim.degrade();
                    }
                }
                let seg = match joined {
                    Some(s) => s,
                    None => sim.new_seg(expandable),
                };
                let n = sim.put(e.addr, e.size, St::Free, seg);
                sim.merge(n);
                dr += e.size as i64;
            }
            Some(a @ (TraceAction::SegmentFree | TraceAction::SegmentUnmap)) => {
                if !sim.remove_range(e.addr, e.size) {
                    sim.mark_truncated(i, || {
                        format!(
                            "{} of {:#x}, which the trace never mapped",
                            a.as_str(),
                            e.addr
                        )
                    });
                }
                dr -= e.size as i64;
            }
            Some(TraceAction::Oom) => {
                if record && window.contains(&i) {
                    p.ooms.push((i, e.size, e.device_free, e.frames, p.cum));
                }
            }
            Some(TraceAction::Snapshot) | None => {}
        }
        if !record {
            if stop == Some(i) {
                return p;
            }
            continue;
        }
        let c = &mut p.cum;
        c.a += da;
        c.ac += dac;
        c.r += dr;
        let c = *c;
        // peaks and the curve are of the window only; the blocks are
        // followed from the start
        if !window.contains(&i) {
            continue;
        }
        if i == window.start {
            p.first = c;
        }
        if c.a > p.max_a.v {
            p.max_a = Max { at: i, v: c.a };
            p.r_at_max_a = c.r;
        }
        p.max_ac.see(i, c.ac);
        p.max_r.see(i, c.r);
        if (i - window.start).is_multiple_of(bucket) {
            p.buckets.push(Bucket {
                start: i,
                a: Max { at: i, v: c.a },
                ac: c.ac,
                r: c.r,
            });
        } else if let Some(b) = p.buckets.last_mut() {
            b.a.see(i, c.a);
            b.ac = b.ac.max(c.ac);
            b.r = b.r.max(c.r);
        }
    }
    p
}

/// Clamp a relative counter plus its baseline at zero, as bytes.
#[inline]
fn bytes(base: i64, rel: i64) -> u64 {
    base.saturating_add(rel).max(0) as u64
}

/// Build the timeline of `device`'s trace, downsampled to at most
/// `points` samples.
pub fn build(snap: &Snapshot, device: usize, cfg: &AllocatorConfig, points: usize) -> Timeline {
    build_window(snap, device, cfg, points, None)
}

/// [`build`], with the peaks, the curve and the out-of-memory events taken
/// over trace entries `window` only (clamped to the trace; the whole trace
/// when `None`). The blocks are still followed from the first entry, so the
/// counters inside the window are those of the whole run.
pub fn build_window(
    snap: &Snapshot,
    device: usize,
    cfg: &AllocatorConfig,
    points: usize,
    window: Option<std::ops::Range<usize>>,
) -> Timeline {
    let empty = Trace::new();
    let trace = snap.device_traces.get(device).unwrap_or(&empty);
    let n = trace.len();
    let window = window.map_or(0..n, |w| w.start.min(n)..w.end.min(n));
    let span = window.len();
    let bucket = span.div_ceil(points.max(1)).max(1);
    let mut p = run(trace, cfg, None, bucket, &window);
    let sim = &mut p.sim;

    // Allocations alive at the end that the trace never allocated.
    let mut pre: Vec<Allocation> = Vec::new();
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        let mut addr = s.address;
        if sim.containing(s.address).is_none() && !trace.is_empty() {
            sim.mark_truncated(n, || {
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
            let known = sim
                .at
                .get(&a)
                .is_some_and(|&n| matches!(sim.node(n).st, St::Alloc(_)));
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
    let truncated = sim.truncated.take();

    let (fa, fac, fr) = final_counters(snap, device);
    let c = p.cum;
    let base = if truncated.is_some() {
        (
            (fa as i64 - c.a).max(0),
            (fac as i64 - c.ac).max(0),
            (fr as i64 - c.r).max(0),
        )
    } else {
        (0, 0, 0)
    };
    let baseline = (base.0 as u64, base.1 as u64, base.2 as u64);
    // The first maximum of max(0, base + x) is the first maximum of x,
    // unless every value clamps to zero: then it is the first entry.
    let peak = |m: Max, base: i64| -> Peak {
        if span == 0 {
            return Peak {
                index: None,
                bytes: base as u64,
            };
        }
        let v = bytes(base, m.v);
        Peak {
            index: Some(if v > 0 { m.at } else { window.start }),
            bytes: if window.start == 0 {
                v.max(base as u64)
            } else {
                v
            },
        }
    };
    let peak_allocated = peak(p.max_a, base.0);
    let at_peak = match peak_allocated.index {
        Some(i) if i == window.start && bytes(base.0, p.max_a.v) == 0 => {
            (bytes(base.0, p.first.a), bytes(base.2, p.first.r))
        }
        Some(_) => (bytes(base.0, p.max_a.v), bytes(base.2, p.r_at_max_a)),
        None => (0, 0),
    };
    let samples = p
        .buckets
        .iter()
        .map(|b| {
            let a = bytes(base.0, b.a.v);
            Sample {
                trace_index: if a > 0 { b.a.at } else { b.start },
                allocated: a,
                active: bytes(base.1, b.ac),
                reserved: bytes(base.2, b.r),
            }
        })
        .collect();
    let ooms = p
        .ooms
        .iter()
        .map(|&(i, requested, device_free, stack, before)| OomEvent {
            trace_index: i,
            requested,
            device_free,
            allocated: bytes(base.0, before.a),
            reserved: bytes(base.2, before.r),
            stack,
        })
        .collect();
    let last = if n == 0 {
        baseline
    } else {
        (bytes(base.0, c.a), bytes(base.1, c.ac), bytes(base.2, c.r))
    };
    let mut t = Timeline {
        entries: n,
        baseline,
        last,
        peak_allocated,
        peak_active: peak(p.max_ac, base.1),
        peak_reserved: peak(p.max_r, base.2),
        at_peak,
        samples,
        ooms,
        truncated,
        estimated_sizes: p.inexact.len(),
        layout_at_peak: None,
        pre,
        lives: p.lives,
        inexact: p.inexact,
    };
    // Second pass, up to the peak, for the layout there.
    if let Some(i) = t.peak_allocated.index {
        let q = run(trace, cfg, Some(i), bucket, &window);
        t.layout_at_peak = q.sim.truncated.is_none().then(|| q.sim.layout());
    }
    t
}
