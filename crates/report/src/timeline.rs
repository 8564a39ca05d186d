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
//! allocation ([`Life`]); the per-entry counters are never materialised.
//! The free-space layout at the peak comes from a copy of the sim kept at
//! a maximum shortly before it, followed on to the peak (timed in
//! `docs/performance.md` and `docs/inspect-speed.md`).
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

    /// Allocation `k`'s (size, start, end), as [`Timeline::lifetimes`]
    /// gives them, without touching the trace.
    pub fn lifetime(&self, k: usize) -> Option<(u64, Option<usize>, Option<usize>)> {
        match self.pre.get(k) {
            Some(a) => Some((a.size, a.start, a.end)),
            None => {
                let l = self.lives.get(k - self.pre.len())?;
                Some((l.size, l.start(), l.end()))
            }
        }
    }

    /// Allocation `k`'s stack, as [`Timeline::allocation`] gives it, read
    /// from the one trace entry it names without building the rest.
    pub fn allocation_stack(&self, trace: &Trace, k: usize) -> Option<StackId> {
        if let Some(a) = self.pre.get(k) {
            return Some(a.stack);
        }
        let l = self.lives.get(k - self.pre.len())?;
        Some(trace.get(l.start().or(l.end())?)?.frames)
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

/// The sim's blocks by start address: open addressing with linear
/// probing (Fibonacci hashing, deletion by backward shift), at most half
/// full. The few hundred blocks of a sim cost one or two probes a lookup,
/// cheaper than a general hash map's for the lookups every entry makes.
#[derive(Clone, Default)]
struct AddrIndex {
    /// (address, block), `NONE` for an empty slot; a power of two of them.
    slots: Vec<(u64, u32)>,
    len: usize,
    /// 64 minus log2 of the slots.
    shift: u32,
}

impl AddrIndex {
    #[inline]
    fn home(&self, a: u64) -> usize {
        (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `a`, if any.
    #[inline]
    fn find(&self, a: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(a);
        loop {
            let (k, v) = self.slots[i];
            if v == NONE {
                return None;
            }
            if k == a {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn get(&self, a: &u64) -> Option<&u32> {
        self.find(*a).map(|i| &self.slots[i].1)
    }

    #[inline]
    fn contains_key(&self, a: &u64) -> bool {
        self.find(*a).is_some()
    }

    /// Map `a` to `n` (not `NONE`); the block it mapped to before.
    #[inline]
    fn insert(&mut self, a: u64, n: u32) -> Option<u32> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(a);
        loop {
            let s = &mut self.slots[i];
            if s.1 == NONE {
                *s = (a, n);
                self.len += 1;
                return None;
            }
            if s.0 == a {
                return Some(std::mem::replace(&mut s.1, n));
            }
            i = (i + 1) & mask;
        }
    }

    /// Forget `a`; the block it mapped to.
    #[inline]
    fn remove(&mut self, a: &u64) -> Option<u32> {
        let i = self.find(*a)?;
        let old = self.slots[i].1;
        let mask = self.slots.len() - 1;
        // the entries after it in its run move back into the hole unless
        // their home lies between the hole and them
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let (k, v) = self.slots[j];
            if v == NONE {
                break;
            }
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = (k, v);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = (0, NONE);
        self.len -= 1;
        Some(old)
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![(0, NONE); cap]);
        self.shift = 64 - cap.trailing_zeros();
        self.len = 0;
        for (k, v) in old {
            if v != NONE {
                self.insert(k, v);
            }
        }
    }

    /// Every (address, block), in no order.
    fn iter(&self) -> impl Iterator<Item = (&u64, &u32)> {
        self.slots
            .iter()
            .filter(|s| s.1 != NONE)
            .map(|(k, v)| (k, v))
    }
}

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
    /// Neighbours among all blocks, in address order (once `ordered`).
    gprev: u32,
    gnext: u32,
    /// Whether its `Alloc` state comes from an `alloc` at its address (not
    /// from a block trimmed by a segment's release).
    own: bool,
}

impl Node {
    /// The free rest of a split block, not yet linked in its segment;
    /// `gprev`/`gnext` its neighbours among all blocks where known.
    #[inline]
    fn free_rest(addr: u64, size: u64, seg: u32, gprev: u32, gnext: u32) -> Self {
        Node {
            addr,
            size,
            st: St::Free,
            seg,
            prev: NONE,
            next: NONE,
            gprev,
            gnext,
            own: false,
        }
    }
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
/// block in one list in address order ([`Ordered`]) and answers from it
/// from then on.
#[derive(Clone)]
struct Sim {
    /// For `round_size` (shared by the copies a [`Checkpoint`] keeps).
    rounder: std::sync::Arc<CachingAllocator>,
    max_split: u64,
    expandable: bool,
    nodes: Vec<Node>,
    spare: Vec<u32>,
    at: AddrIndex,
    segs: Vec<Seg>,
    /// First block's address → segment (while not `ordered`).
    seg_at: BTreeMap<u64, u32>,
    /// Every block in address order, once the trace showed an inconsistency.
    ordered: Option<Ordered>,
    /// The allocations whose block the sim removed before their free, by
    /// the address they were allocated at: with the blocks in `Alloc` state
    /// at their own address, the trace's allocations not yet freed.
    lost: AddrMap<u32>,
    /// Whether [`Ordered`] keeps the ordered map from the start (the tests
    /// compare the two ways).
    ordered_map: bool,
    truncated: Option<String>,
}

/// Every block of the sim in address order: the blocks linked through
/// `gprev`/`gnext`, so that the block before a known block (what merging
/// asks) and the place of a block split off (right after its block) cost
/// a step. The block before any other address is found from a sorted copy
/// of the list: a binary search gives the last block copied before the
/// address that is still there, the list is walked on from it; the copy is
/// made again when that takes more than [`Ordered::WALK`] steps. Where the
/// copies and walks cost more than [`Ordered::WORK_PER_OP`] steps per
/// change or search, an ordered map is kept in step instead.
#[derive(Clone)]
struct Ordered {
    /// The first block.
    head: u32,
    /// (start, block) of every block at the last copy, in order.
    index: Vec<(u64, u32)>,
    /// Blocks copied and steps walked, and blocks linked, unlinked and
    /// searched for, so far.
    work: u64,
    ops: u64,
    /// Every block by start, once the copies cost too much.
    tree: Option<BTreeMap<u64, u32>>,
}

impl Ordered {
    /// Steps a search may walk before the copy is made again.
    const WALK: u64 = 32;
    /// Steps allowed per operation, and beyond, before the ordered map
    /// takes over (bounds on the work, not tuned figures: a step copies or
    /// reads one block, an ordered map's operation costs tens).
    const WORK_PER_OP: u64 = 32;
    const FREE_WORK: u64 = 1 << 16;
}

impl Sim {
    fn new(cfg: AllocatorConfig) -> Sim {
        Sim {
            max_split: cfg.max_split_size,
            expandable: cfg.expandable_segments,
            rounder: std::sync::Arc::new(CachingAllocator::new(cfg)),
            nodes: Vec::new(),
            spare: Vec::new(),
            at: AddrIndex::default(),
            segs: Vec::new(),
            seg_at: BTreeMap::new(),
            ordered: None,
            lost: AddrMap::default(),
            ordered_map: false,
            truncated: None,
        }
    }

    fn mark_truncated(&mut self, i: usize, why: impl FnOnce() -> String) {
        if self.truncated.is_none() {
            self.truncated = Some(format!("trace entry {i}: {}", why()));
        }
    }

    /// From now on, keep every block in one list in address order.
    fn degrade(&mut self) {
        if self.ordered.is_some() {
            return;
        }
        let mut index: Vec<(u64, u32)> = self.at.iter().map(|(&a, &n)| (a, n)).collect();
        index.sort_unstable();
        let mut prev = NONE;
        for &(_, n) in &index {
            let b = self.node_mut(n);
            b.gprev = prev;
            b.gnext = NONE;
            if prev != NONE {
                self.node_mut(prev).gnext = n;
            }
            prev = n;
        }
        self.ordered = Some(Ordered {
            head: index.first().map_or(NONE, |&(_, n)| n),
            work: index.len() as u64,
            tree: self.ordered_map.then(|| index.iter().copied().collect()),
            index,
            ops: 0,
        });
        self.seg_at.clear();
    }

    /// The block with the greatest start below `addr`, once `ordered`.
    fn ord_before(&mut self, addr: u64) -> Option<u32> {
        let (nodes, at) = (&self.nodes, &self.at);
        let o = self.ordered.as_mut()?;
        o.ops += 1;
        loop {
            if let Some(t) = &o.tree {
                return t.range(..addr).next_back().map(|(_, &n)| n);
            }
            // the last block copied before `addr` that is still there
            let mut i = o.index.partition_point(|&(a, _)| a < addr);
            let mut steps = 0;
            let mut p = NONE;
            while i > 0 && steps <= Ordered::WALK {
                i -= 1;
                let (a, n) = o.index[i];
                if at.get(&a) == Some(&n) {
                    p = n;
                    break;
                }
                steps += 1;
            }
            if p == NONE && i == 0 && steps <= Ordered::WALK {
                // none: from the first block, if it lies before
                p = o.head;
                if p == NONE || nodes[p as usize].addr >= addr {
                    o.work += steps;
                    return None;
                }
            }
            // walk on to the last block before `addr`
            while p != NONE && steps <= Ordered::WALK {
                let q = nodes[p as usize].gnext;
                if q == NONE || nodes[q as usize].addr >= addr {
                    o.work += steps;
                    return Some(p);
                }
                p = q;
                steps += 1;
            }
            // too far: copy the list again (then the search takes no step)
            o.index.clear();
            let mut n = o.head;
            while n != NONE {
                let b = &nodes[n as usize];
                o.index.push((b.addr, n));
                n = b.gnext;
            }
            o.work += steps + o.index.len() as u64;
            if o.work
                > o.ops
                    .saturating_mul(Ordered::WORK_PER_OP)
                    .saturating_add(Ordered::FREE_WORK)
            {
                o.tree = Some(o.index.iter().copied().collect());
                o.index = Vec::new();
            }
        }
    }

    /// Link block `n` into the address-ordered list, once `ordered`;
    /// `hint`, when not `NONE`, is a block of the list before it.
    fn ord_link(&mut self, n: u32, hint: u32) {
        if self.ordered.is_none() {
            return;
        }
        let addr = self.node(n).addr;
        // walk on from the hint a few blocks, else search
        let mut p = hint;
        let mut steps = 0;
        while p != NONE {
            let q = self.node(p).gnext;
            if q == NONE || self.node(q).addr >= addr {
                break;
            }
            steps += 1;
            p = if steps > Ordered::WALK { NONE } else { q };
        }
        if p == NONE {
            p = self.ord_before(addr).unwrap_or(NONE);
        }
        let Some(o) = self.ordered.as_mut() else {
            return;
        };
        let next = if p == NONE {
            std::mem::replace(&mut o.head, n)
        } else {
            std::mem::replace(&mut self.nodes[p as usize].gnext, n)
        };
        if next != NONE {
            self.nodes[next as usize].gprev = n;
        }
        o.ops += 1;
        if let Some(t) = &mut o.tree {
            t.insert(addr, n);
        }
        let b = &mut self.nodes[n as usize];
        b.gprev = p;
        b.gnext = next;
    }

    /// Unlink block `n` from the address-ordered list, once `ordered`.
    fn ord_unlink(&mut self, n: u32) {
        let Some(o) = self.ordered.as_mut() else {
            return;
        };
        let b = self.nodes[n as usize];
        if b.gprev == NONE {
            o.head = b.gnext;
        } else {
            self.nodes[b.gprev as usize].gnext = b.gnext;
        }
        if b.gnext != NONE {
            self.nodes[b.gnext as usize].gprev = b.gprev;
        }
        o.ops += 1;
        if let Some(t) = &mut o.tree {
            t.remove(&b.addr);
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
    fn pred(&mut self, addr: u64, strict: bool) -> Option<u32> {
        if self.ordered.is_some() {
            return match self.at.get(&addr) {
                Some(&n) if strict => {
                    let p = self.node(n).gprev;
                    (p != NONE).then_some(p)
                }
                Some(&n) => Some(n),
                None => self.ord_before(addr),
            };
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
    fn containing(&mut self, addr: u64) -> Option<u32> {
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
    }

    /// Unlink block `n` from its segment and forget it.
    fn remove(&mut self, n: u32) {
        let b = *self.node(n);
        // (one lookup: the address is put back where another block has it)
        match self.at.remove(&b.addr) {
            Some(m) if m == n => {
                self.ord_unlink(n);
                if let (true, St::Alloc(k)) = (b.own, b.st) {
                    self.lost.insert(b.addr, k);
                }
            }
            Some(m) => {
                self.at.insert(b.addr, m);
            }
            None => {}
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
        self.put_after(addr, size, st, seg, NONE)
    }

    /// [`Sim::put`], `hint` (when not `NONE`) a block starting before it.
    fn put_after(&mut self, addr: u64, size: u64, st: St, seg: u32, hint: u32) -> u32 {
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
            gprev: NONE,
            gnext: NONE,
            own: false,
        });
        let mut after = self.segs[seg as usize].tail;
        while after != NONE && self.node(after).addr > addr {
            after = self.node(after).prev;
        }
        self.link_after(n, after);
        self.ord_link(n, hint);
        n
    }

    /// Split free block `n` (at least `r` bytes): its first `r` bytes stay
    /// in `n`, the rest becomes a free block right after it.
    #[inline]
    fn split(&mut self, n: u32, r: u64) {
        let b = *self.node(n);
        let rest_addr = b.addr + r;
        self.node_mut(n).size = r;
        if self.ordered.is_some() {
            // `n` is the block at its address: when no block starts from
            // it up to the rest, in its segment or among all, the rest
            // goes right after it in both lists (where `put_after` puts it)
            let g = b.gnext;
            let clear = |x: u32| x == NONE || self.node(x).addr > rest_addr;
            if r > 0 && clear(g) && clear(b.next) {
                let m = self.alloc_node(Node::free_rest(rest_addr, b.size - r, b.seg, n, g));
                self.link_after(m, n);
                self.node_mut(n).gnext = m;
                if g != NONE {
                    self.node_mut(g).gprev = m;
                }
                if let Some(o) = self.ordered.as_mut() {
                    o.ops += 1;
                    if let Some(t) = &mut o.tree {
                        t.insert(rest_addr, m);
                    }
                }
                return;
            }
        }
        if self.ordered.is_some()
            || self.at.contains_key(&rest_addr)
            || (b.next != NONE && self.node(b.next).addr < rest_addr)
        {
            // Blocks followed by address may overlap: the general path.
            self.put_after(rest_addr, b.size - r, St::Free, b.seg, n);
            return;
        }
        let m = self.alloc_node(Node::free_rest(rest_addr, b.size - r, b.seg, NONE, NONE));
        self.link_after(m, n);
    }

    /// Merge free block `n` with the free blocks right before and after
    /// it in its segment (`free_block` → `try_merge_blocks`).
    #[inline]
    fn merge(&mut self, mut n: u32) {
        let b = *self.node(n);
        // The block before it: its predecessor in the segment, which is
        // the block before it in memory while segments are disjoint (once
        // `ordered`, its predecessor among all blocks: `n` is the block at
        // its address, as both callers found or put it there).
        debug_assert_eq!(self.at.get(&b.addr), Some(&n));
        let prev = if self.ordered.is_some() {
            (b.gprev != NONE).then_some(b.gprev)
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
        if let Some(q) = self.at_end(&b) {
            let qb = *self.node(q);
            if qb.seg == b.seg && qb.st == St::Free {
                self.remove(q);
                self.node_mut(n).size += qb.size;
            }
        }
    }

    /// The block the address index has where block `b` (linked, the
    /// block at its address) ends, when it may merge with `b`. Blocks are
    /// linked in address order: none starts there in `b`'s segment when
    /// the next one there starts past the end (one in another segment
    /// never merges), nor at all, once `ordered`, when the next of all
    /// blocks does.
    #[inline]
    fn at_end(&self, b: &Node) -> Option<u32> {
        let end = b.addr + b.size;
        let c = if self.ordered.is_some() {
            b.gnext
        } else {
            b.next
        };
        if b.size > 0 && (c == NONE || self.node(c).addr > end) {
            return None;
        }
        if b.size > 0 && self.ordered.is_some() && self.node(c).addr == end {
            return Some(c);
        }
        self.at.get(&end).copied()
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
            Some(_) => {
                let mut v = Vec::new();
                let mut n = match self.ord_before(addr) {
                    Some(p) => self.node(p).gnext,
                    None => self.ordered.as_ref().map_or(NONE, |o| o.head),
                };
                while n != NONE && self.node(n).addr < end {
                    v.push((self.node(n).addr, n));
                    n = self.node(n).gnext;
                }
                v
            }
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

/// The state a pass follows the trace with: the sim and, when recording,
/// the allocations.
struct Walk {
    sim: Sim,
    /// Whether the allocations are recorded (the full pass).
    record: bool,
    lives: Vec<Life>,
    inexact: Vec<u32>,
    /// Pending frees of blocks allocated before the trace: addr -> size.
    pre_pending: AddrMap<u64>,
    /// Whether a pass that does not record would have found the trace
    /// truncated by now (it takes a free of a block the sim lost for one of
    /// memory allocated before the trace).
    unrecorded_truncated: bool,
    /// The last `free_requested` of a block: (its entry's index + 1, its
    /// address, the block), so that the `free_completed` right after it
    /// (most are) finds the block without a lookup.
    last_free: (usize, u64, u32),
}

/// The sim right after one entry, kept to follow the blocks again from
/// there ([`layout_at`]).
struct Checkpoint {
    index: usize,
    sim: Sim,
    /// Whether a pass that does not record would have found the trace
    /// truncated by then.
    truncated: bool,
}

/// What the full pass gathers.
struct Pass {
    walk: Walk,
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
    /// The sim at a maximum of allocated bytes at most [`Checkpoint`]'s
    /// spacing before the first maximum (see [`run`]).
    checkpoint: Option<Checkpoint>,
    /// Entries a bucket of the curve spans.
    bucket: usize,
    /// The entries the peaks and the curve are taken over.
    window: std::ops::Range<usize>,
    /// Entries left in the current bucket.
    left: usize,
    /// The index of the next entry.
    next: usize,
}

/// Convert a trace index to the `u32` a [`Life`] stores (traces hold fewer
/// than `u32::MAX` entries).
#[inline]
fn ix(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(NONE - 1)
}

impl Walk {
    fn new(sim: Sim, record: bool, capacity: usize) -> Walk {
        Walk {
            sim,
            record,
            lives: Vec::with_capacity(capacity),
            inexact: Vec::new(),
            pre_pending: AddrMap::default(),
            unrecorded_truncated: false,
            last_free: (usize::MAX, 0, NONE),
        }
    }

    /// Follow entry `i`; returns the change of (allocated, active,
    /// reserved) bytes.
    #[inline(always)]
    fn step(&mut self, i: usize, e: &vramscope_snapshot::TraceEntry) -> (i64, i64, i64) {
        let Walk {
            sim,
            record,
            lives,
            inexact,
            pre_pending,
            unrecorded_truncated,
            last_free,
        } = self;
        let record = *record;
        let (mut da, mut dac, mut dr) = (0i64, 0i64, 0i64);
        match e.action {
            Some(TraceAction::Alloc) => {
                let r = sim.rounder.round_size(e.size);
                let k = lives.len() as u32;
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
                    let m = sim.node_mut(n);
                    m.st = St::Alloc(k);
                    m.own = true;
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
                    let n = sim.put(e.addr, r, St::Alloc(k), seg);
                    sim.node_mut(n).own = true;
                    r
                };
                if !sim.lost.is_empty() {
                    sim.lost.remove(&e.addr);
                }
                if record {
                    if !exact {
                        inexact.push(k);
                    }
                    lives.push(Life {
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
                        if let Some(l) = lives.get_mut(k as usize) {
                            l.end = ix(i);
                        }
                        if !sim.lost.is_empty() {
                            sim.lost.remove(&e.addr);
                        }
                        da -= size as i64;
                        let n = n.unwrap_or(NONE);
                        sim.node_mut(n).st = St::Pending(k);
                        *last_free = (i + 1, e.addr, n);
                    }
                    _ if record && sim.lost.contains_key(&e.addr) => {
                        // allocated in the trace, its block lost by the sim
                        // (blocks followed by address only overlap): the
                        // free at its address still ends it
                        *unrecorded_truncated = true;
                        let k = sim.lost.remove(&e.addr).unwrap_or(NONE);
                        let size = match lives.get_mut(k as usize) {
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
                            inexact.push(lives.len() as u32);
                            lives.push(Life {
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
                // (no entry in between changed the blocks)
                let n = if *last_free == (i, e.addr, last_free.2) {
                    Some(last_free.2)
                } else {
                    sim.at.get(&e.addr).copied()
                };
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
            Some(TraceAction::Oom | TraceAction::Snapshot) | None => {}
        }
        (da, dac, dr)
    }
}

/// Entries between checkpoints, at least (see [`run`]).
const CHECKPOINT_SPACING: usize = 1 << 12;

/// The recording pass: follow the trace through the simulated segments,
/// gathering the allocations, the counters' peaks and curve over `window`,
/// and the out-of-memory events there.
///
/// At a new maximum of allocated bytes, the sim is kept (a
/// [`Checkpoint`]) when the last one is [`CHECKPOINT_SPACING`] entries or
/// eight times the sim's blocks old: the peak (the last new maximum) then
/// lies within that many entries of the last checkpoint, which
/// [`layout_at`] follows the blocks on from, and the copies cost at most
/// about an eighth of a step per entry.
fn run(trace: &Trace, sim: Sim, bucket: usize, window: &std::ops::Range<usize>) -> Pass {
    let mut p = Pass::new(sim, trace.len(), bucket, window.clone());
    for e in trace.iter() {
        p.see(&e);
    }
    p
}

impl Pass {
    /// A pass over a trace of `n` entries.
    fn new(sim: Sim, n: usize, bucket: usize, window: std::ops::Range<usize>) -> Pass {
        // One `Life` per `alloc` (and per `free_requested` of memory
        // allocated before the trace, rare): reserve them at once (growing
        // a big Vec can briefly need twice its size). One per entry bounds
        // them without a pass to count; the pages never written are never
        // touched.
        Pass {
            walk: Walk::new(sim, true, n),
            ooms: Vec::new(),
            cum: Cum::default(),
            first: Cum::default(),
            max_a: Max::NONE,
            max_ac: Max::NONE,
            max_r: Max::NONE,
            r_at_max_a: 0,
            buckets: Vec::new(),
            checkpoint: None,
            bucket: bucket.max(1),
            window,
            left: 0,
            next: 0,
        }
    }

    /// Follow the next entry, `e`.
    #[inline(always)]
    fn see(&mut self, e: &vramscope_snapshot::TraceEntry) {
        let p = self;
        let i = p.next;
        p.next += 1;
        let (da, dac, dr) = p.walk.step(i, e);
        if e.action == Some(TraceAction::Oom) && p.window.contains(&i) {
            p.ooms.push((i, e.size, e.device_free, e.frames, p.cum));
        }
        let c = &mut p.cum;
        c.a += da;
        c.ac += dac;
        c.r += dr;
        let c = *c;
        // peaks and the curve are of the window only; the blocks are
        // followed from the start
        if !p.window.contains(&i) {
            return;
        }
        // a counter's maximum, overall or in the bucket, can only be
        // passed where it rose (the entry before was seen in the same
        // window and bucket): most entries are frees
        let first = i == p.window.start;
        if first {
            p.first = c;
        }
        if p.left != 0 && !first && da <= 0 && dac <= 0 && dr <= 0 {
            p.left -= 1;
            return;
        }
        if c.a > p.max_a.v {
            p.max_a = Max { at: i, v: c.a };
            p.r_at_max_a = c.r;
            let sim = &p.walk.sim;
            let due = p
                .checkpoint
                .as_ref()
                .is_none_or(|k| i - k.index >= CHECKPOINT_SPACING.max(8 * sim.nodes.len()));
            if due {
                p.checkpoint = Some(Checkpoint {
                    index: i,
                    sim: sim.clone(),
                    truncated: sim.truncated.is_some() || p.walk.unrecorded_truncated,
                });
            }
        }
        p.max_ac.see(i, c.ac);
        p.max_r.see(i, c.r);
        if p.left == 0 {
            p.left = p.bucket;
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
        p.left -= 1;
    }
}

/// The recording pass over a device's trace, run while the rest of its
/// snapshot is read ([`vramscope_snapshot::read_snapshot_file_early`]),
/// with the allocator settings read ahead of it: [`build_window_early`]
/// takes it where it followed what the snapshot holds (the same entries,
/// settings and points), and makes the timeline itself otherwise.
pub struct EarlyPass {
    pass: Pass,
    cfg: AllocatorConfig,
    entries: usize,
    points: usize,
}

/// [`build`]'s pass over the whole of `trace`, under `cfg`, for at most
/// `points` samples (see [`EarlyPass`]).
pub fn early_pass(
    trace: vramscope_snapshot::EarlyTrace,
    cfg: AllocatorConfig,
    points: usize,
) -> EarlyPass {
    let n = trace.len();
    let bucket = n.div_ceil(points.max(1)).max(1);
    let mut p = Pass::new(Sim::new(cfg.clone()), n, bucket, 0..n);
    trace.for_each(|e| p.see(&e));
    EarlyPass {
        pass: p,
        cfg,
        entries: n,
        points,
    }
}

/// The free-space layout right after entry `stop`, following the blocks
/// only (not recording), from the checkpoint when it lies at or before
/// `stop`, else from the first entry; `None` when a pass that does not
/// record finds the trace truncated by then.
fn layout_at(
    trace: &Trace,
    cfg: &AllocatorConfig,
    checkpoint: Option<Checkpoint>,
    stop: usize,
) -> Option<Layout> {
    let (from, sim, truncated) = match checkpoint {
        Some(k) if k.index <= stop => (k.index + 1, k.sim, k.truncated),
        _ => (0, Sim::new(cfg.clone()), false),
    };
    let mut w = Walk::new(sim, false, 0);
    for i in from..=stop {
        let e = trace.get(i)?;
        w.step(i, &e);
    }
    (!truncated && w.sim.truncated.is_none()).then(|| w.sim.layout())
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
    build_window_early(snap, device, cfg, points, window, None)
}

/// [`build_window`], taking the pass `early` made over device
/// `early.0`'s trace ([`early_pass`]) where it followed what this one
/// would: the same device, entries and settings, the whole trace, as many
/// points; the stacks of its out-of-memory events are read from the
/// trace. Otherwise the pass is made here.
pub fn build_window_early(
    snap: &Snapshot,
    device: usize,
    cfg: &AllocatorConfig,
    points: usize,
    window: Option<std::ops::Range<usize>>,
    early: Option<(usize, EarlyPass)>,
) -> Timeline {
    let empty = Trace::new();
    let trace = snap.device_traces.get(device).unwrap_or(&empty);
    let n = trace.len();
    let window = window.map_or(0..n, |w| w.start.min(n)..w.end.min(n));
    let span = window.len();
    let bucket = span.div_ceil(points.max(1)).max(1);
    let early = early.filter(|(d, e)| {
        *d == device && e.entries == n && e.cfg == *cfg && e.points == points && window == (0..n)
    });
    let mut p = match early {
        Some((_, e)) => {
            let mut p = e.pass;
            for o in &mut p.ooms {
                o.3 = trace.get(o.0).map_or(StackId::EMPTY, |t| t.frames);
            }
            p
        }
        None => run(trace, Sim::new(cfg.clone()), bucket, &window),
    };
    let sim = &mut p.walk.sim;

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
        estimated_sizes: p.walk.inexact.len(),
        layout_at_peak: None,
        pre,
        lives: std::mem::take(&mut p.walk.lives),
        inexact: std::mem::take(&mut p.walk.inexact),
    };
    // The blocks followed again up to the peak, for the layout there.
    if let Some(i) = t.peak_allocated.index {
        t.layout_at_peak = layout_at(trace, cfg, p.checkpoint, i);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_index_is_a_map() {
        // addresses from a small range (runs of collisions, removals in
        // the middle of runs) and 512-byte multiples, against a HashMap
        let mut rng = vramscope_testkit::XorShift(0x5eed);
        for spread in [64u64, 4096] {
            let mut a = AddrIndex::default();
            let mut m: HashMap<u64, u32> = HashMap::new();
            for step in 0..20_000u32 {
                let k = (rng.next() % spread) * 512;
                match rng.next() % 3 {
                    0 => assert_eq!(a.remove(&k), m.remove(&k), "{step}"),
                    _ => assert_eq!(a.insert(k, step), m.insert(k, step), "{step}"),
                }
                assert_eq!(a.get(&k), m.get(&k));
                assert_eq!(a.len, m.len());
            }
            for (k, v) in &m {
                assert_eq!(a.get(k), Some(v));
            }
            let mut got: Vec<(u64, u32)> = a.iter().map(|(&k, &v)| (k, v)).collect();
            let mut want: Vec<(u64, u32)> = m.into_iter().collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }

    /// The wrapped real snapshot: its trace frees blocks allocated before
    /// it, so the sim keeps its blocks in address order.
    fn wrapped() -> Snapshot {
        let path = vramscope_testkit::xz::fixture_file(
            "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
        );
        vramscope_snapshot::read_snapshot_file(path).unwrap()
    }

    /// What a pass found, to compare two passes.
    fn outcome(p: &Pass) -> (Vec<Life>, Vec<u32>, usize, i64, i64, Option<String>, Layout) {
        (
            p.walk.lives.clone(),
            p.walk.inexact.clone(),
            p.max_a.at,
            p.max_a.v,
            p.cum.r,
            p.walk.sim.truncated.clone(),
            p.walk.sim.layout(),
        )
    }

    #[test]
    fn the_ordered_map_answers_as_the_sorted_copies_do() {
        let snap = wrapped();
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        for cut in [0, 3_000, 9_000] {
            let mut trace = snap.device_traces[0].clone();
            trace.drop_front(cut);
            let window = 0..trace.len();
            let copies = run(&trace, Sim::new(cfg.clone()), 64, &window);
            let mut sim = Sim::new(cfg.clone());
            sim.ordered_map = true;
            let map = run(&trace, sim, 64, &window);
            let o = |p: &Pass| p.walk.sim.ordered.as_ref().map(|o| o.tree.is_some());
            assert_eq!(
                o(&copies),
                Some(false),
                "cut {cut}: sorted copies throughout"
            );
            assert_eq!(o(&map), Some(true), "cut {cut}: the ordered map took over");
            assert_eq!(outcome(&copies), outcome(&map), "cut {cut}");
        }
    }

    #[test]
    fn the_layout_at_the_peak_is_the_same_from_a_checkpoint() {
        // a complete trace (the layout is known)
        let snap = vramscope_testkit::synth::generate(&vramscope_testkit::synth::Options {
            entries: 40_000,
            ..Default::default()
        })
        .unwrap()
        .snapshot;
        let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
        let trace = &snap.device_traces[0];
        // peaks over a window from the middle: the checkpoint lies in it
        let window = trace.len() / 3..trace.len();
        let p = run(trace, Sim::new(cfg.clone()), 64, &window);
        let peak = p.max_a.at;
        let k = p.checkpoint.unwrap();
        assert!(
            k.index >= window.start && k.index <= peak,
            "checkpoint {} peak {peak}",
            k.index
        );
        let from_start = layout_at(trace, &cfg, None, peak);
        assert!(from_start.is_some());
        assert_eq!(layout_at(trace, &cfg, Some(k), peak), from_start);
    }
}
