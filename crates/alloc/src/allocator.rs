//! `DeviceCachingAllocator` of `c10/cuda/CUDACachingAllocator.cpp` (PyTorch
//! 2.11), one function here for each function there, same names, same order
//! of effects. Comments cite the rule each branch reproduces.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::addrmap::AddrMap;
use crate::config::AllocatorConfig;
use crate::device::{Device, SimDevice};
use crate::error::{AllocError, OutOfMemory};
use crate::fits::Fit;
use crate::freeset::FreeSet;
use crate::largepool::LargePool;
use crate::malloc_async::AsyncPool;
use crate::skaset::SkaSet;
use crate::smallpool::SmallPool;
use crate::stats::DeviceStats;
use crate::trace::{TraceAction, TraceEntry};
use crate::{Addr, StreamId};

/// `kMinBlockSize`: all sizes are rounded to at least 512 bytes.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// `kSmallSize`: the largest "small" allocation is 1 MiB.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: small allocations are packed in 2 MiB segments.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kMinLargeAlloc`: allocations between 1 and 10 MiB use a 20 MiB segment.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: larger segments are rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = 2 << 20;

type Id = u32;
const NIL: Id = u32::MAX;

/// A block: a free or allocated range of a segment (`struct Block`).
#[derive(Debug, Clone, Copy)]
struct Block {
    addr: u64,
    size: u64,
    requested_size: u64,
    stream: u64,
    small: bool,
    allocated: bool,
    mapped: bool,
    prev: Id,
    next: Id,
    event_count: u32,
    /// `!stream_uses.empty()`; the streams themselves live in
    /// `CachingAllocator::stream_uses` (rare, and this keeps Block plain).
    has_stream_uses: bool,
    gc_count_base: u64,
    /// Index of the expandable segment this block lies in, or NIL.
    seg: Id,
}

/// `BlockPool`: free blocks ordered by `BlockComparatorSize`
/// (stream, size, address) and unmapped ones by `BlockComparatorAddress`.
#[derive(Debug, Clone, Default)]
struct Pool {
    blocks: FreeSet,
    unmapped: BTreeSet<(u64, u64, Id)>,
    get_free_blocks_call_count: u64,
    /// how many times `blocks` has changed ([`CachingAllocator::free_set_changes`])
    changes: u64,
}

/// `ExpandableSegment`: a reserved virtual range mapped page by page.
#[derive(Debug, Clone)]
struct ExpandableSegment {
    base: u64,
    segment_size: u64,
    max_handles: u64,
    handles: Vec<bool>,
}

impl ExpandableSegment {
    fn size(&self) -> u64 {
        self.max_handles * self.segment_size
    }
    fn num_segments(&self, size: u64) -> u64 {
        size.div_ceil(self.segment_size)
    }
    fn left(&self, p: u64) -> u64 {
        (p - self.base) / self.segment_size
    }
    fn right(&self, p: u64) -> u64 {
        self.num_segments(p - self.base)
    }
    fn range(&self, begin: u64, end: u64) -> (u64, u64) {
        (
            self.base + self.segment_size * begin,
            self.segment_size * (end - begin),
        )
    }
    /// `ExpandableSegment::map`: map whole pages covering [ptr, ptr+size).
    /// All or nothing: when `cuMemCreate` fails part way, what this call
    /// created is released and nothing is mapped (size 0).
    fn map(&mut self, ptr: u64, size: u64, dev: &mut impl Device) -> (u64, u64) {
        let begin = self.left(ptr);
        let end = self.right(ptr + size);
        debug_assert_eq!(self.base + begin * self.segment_size, ptr);
        if begin == end {
            return self.range(begin, end);
        }
        let (addr, bytes) = self.range(begin, end);
        if !dev.map(addr, bytes) {
            return self.range(begin, begin);
        }
        while (self.handles.len() as u64) < end {
            self.handles.push(false);
        }
        for i in begin..end {
            debug_assert!(!self.handles[i as usize]);
            self.handles[i as usize] = true;
        }
        (addr, bytes)
    }
    /// `ExpandableSegment::unmap`: unmap the whole pages inside [ptr, ptr+size).
    fn unmap(&mut self, ptr: u64, size: u64, dev: &mut impl Device) -> (u64, u64) {
        let begin = self.right(ptr);
        let end = self.left(ptr + size);
        if begin >= end {
            return (ptr, 0);
        }
        for i in begin..end {
            self.handles[i as usize] = false;
        }
        self.trim();
        let (addr, bytes) = self.range(begin, end);
        dev.unmap(addr, bytes);
        (addr, bytes)
    }
    fn trim(&mut self) {
        while self.handles.last() == Some(&false) {
            self.handles.pop();
        }
    }
}

/// When does a block freed while in use on other streams (`record_stream`)
/// become reusable?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventPolicy {
    /// Its events have completed by the next `malloc` (`process_events`).
    CompleteAtNextMalloc,
    /// Only when [`CachingAllocator::complete_events`] says so, or at a
    /// synchronizing call (`empty_cache`, the out-of-memory retry).
    Manual,
}

/// One block of a segment as `snapshot()` reports it (`BlockInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Device address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// The size last requested for it (kept after it is freed, as in PyTorch).
    pub requested_size: u64,
    /// Handed out to the program.
    pub allocated: bool,
    /// Allocated, or freed but still in use on another stream.
    pub active: bool,
}

/// One segment as `snapshot()` reports it (`SegmentInfo`); expandable
/// segments are reported once per contiguous mapped range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Start address.
    pub address: u64,
    /// Sum of its block sizes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks.
    pub active_size: u64,
    /// Requested bytes of active blocks.
    pub requested_size: u64,
    /// Allocation stream.
    pub stream: u64,
    /// In the large pool (`segment_type == "large"`).
    pub is_large: bool,
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// Its blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

/// A block [`CachingAllocator::fit_for_a_moment`] found: the bytes the
/// malloc hands out, the free block it takes (size, address) and the part of
/// it left free (size, address) where it is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// the block's bytes
    pub bytes: u64,
    /// the free block taken
    pub took: (u64, Addr),
    /// the part left free
    pub rest: Option<(u64, Addr)>,
    /// of the small pool (else the large one)
    pub small: bool,
}

/// A block handed out by [`CachingAllocator::malloc_handle`]: its address
/// and the allocator's name for it, so that
/// [`CachingAllocator::free_handle`] finds it without a lookup by address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    addr: Addr,
    id: Id,
}

impl Handle {
    /// The block's device address (what `malloc` returns).
    pub fn addr(&self) -> Addr {
        self.addr
    }
}

/// `stream_uses` is keyed by block id.
type IdMap<V> = crate::inthash::FastMap<u64, V>;

/// A vector clock of captured work: (stream, its nodes followed), by stream.
type Clock = Vec<(u64, u64)>;

/// `a` follows `b` too.
fn clock_merge(a: &mut Clock, b: &Clock) {
    for &(s, n) in b {
        match a.iter_mut().find(|e| e.0 == s) {
            Some(e) => e.1 = e.1.max(n),
            None => a.push((s, n)),
        }
    }
}

/// Every node `a` counts is one `b` follows.
fn clock_le(a: &Clock, b: &Clock) -> bool {
    a.iter()
        .all(|&(s, n)| n == 0 || b.iter().any(|&(t, m)| t == s && m >= n))
}

/// Free cached blocks per pool ([`CachingAllocator::free_block_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeBlocks {
    /// in the small pool (blocks of 1 MiB segments)
    pub small: usize,
    /// in the large pool
    pub large: usize,
}

/// The caching allocator of one device (`DeviceCachingAllocator`).
#[derive(Debug, Clone)]
pub struct CachingAllocator<D: Device = SimDevice> {
    config: AllocatorConfig,
    device: D,
    blocks: Vec<Block>,
    free_ids: Vec<Id>,
    /// `small_blocks` (index 0) and `large_blocks` (index 1).
    pools: [Pool; 2],
    /// `allocated_blocks`: the blocks handed out, by address.
    allocated: AddrMap,
    /// Whether `allocated` is kept (see [`CachingAllocator::without_address_index`]).
    index_addresses: bool,
    /// Whether only the statistics of the figures are kept (see
    /// [`CachingAllocator::figures_only`]).
    figures_only: bool,
    /// `Block::stream_uses` of the blocks that have any.
    stream_uses: IdMap<Vec<u64>>,
    /// Outstanding (stream, block) events, in the order they were recorded.
    events: Vec<(u64, Id)>,
    /// `captures_underway`: the `beginAllocateToPool` calls (a CUDA graph's
    /// capture, `use_mem_pool`) not yet ended.
    captures_underway: u32,
    /// `deferred_blocks`: blocks freed with stream uses while a capture was
    /// underway, in the order they were freed, with their free markers
    /// (`record_free_markers`, `graph_capture_record_stream_reuse`): the
    /// clock of the captured work they must precede, `None` where the block
    /// waits for the capture's end.
    deferred: Vec<(Id, Option<Clock>)>,
    /// The order of the work captured so far, per stream capturing: a vector
    /// clock (stream -> how many of that stream's captured nodes this
    /// stream's last node follows). A stream is capturing while it has one.
    capture_clocks: IdMap<Clock>,
    /// The clock an event recorded on a capturing stream carries.
    capture_events: IdMap<Clock>,
    /// `block_to_graph_stream_uses`: the streams recorded on a block while a
    /// capture was underway.
    graph_stream_uses: IdMap<Vec<u64>>,
    event_policy: EventPolicy,
    segments: Vec<Option<ExpandableSegment>>,
    /// `expandable_segments_`, in creation order.
    live_segments: Vec<Id>,
    total_allocated_memory: u64,
    allowed_memory_maximum: u64,
    set_fraction: bool,
    stats: DeviceStats,
    trace: Option<Vec<TraceEntry>>,
    /// The best fits of the mallocs since [`Self::record_fits`], and
    /// whether a rule other than best fit and segment creation took part.
    fits: Option<(Vec<Fit>, bool)>,
    /// The buffer of the last recording, emptied, for the next one.
    fits_spare: Vec<Fit>,
    /// Streams whose cached blocks `release_cached_blocks` leaves alone: the
    /// streams a caller keeps a CUDA graph's private pool under while the
    /// graph lives (`graph_pools` with `use_count > 0` are not released).
    kept_streams: Vec<u64>,
    /// The twin's private pool streams (a private pool's blocks allocated on
    /// one stream are keyed by a stream id of their own): private stream ->
    /// (the pool's `MempoolIdHash`, the stream they are allocated on).
    private_pools: IdMap<(u64, u64)>,
    /// `no_split_pools` (`setNoSplit`, `MemPool(no_split=True)`).
    no_split_pools: Vec<u64>,
    /// `use_on_oom_pools` (`setUseOnOOM`, `MemPool(use_on_oom=True)`), in
    /// the order `try_mempool_fallback` walks them.
    use_on_oom_pools: SkaSet,
    /// `backend:cudaMallocAsync`: the device's default pool
    /// (`malloc_async.rs`); `None` for the native allocator.
    malloc_async: Option<AsyncPool>,
}

fn pool_index(small: bool) -> usize {
    if small {
        0
    } else {
        1
    }
}

impl CachingAllocator<SimDevice> {
    /// A fresh allocator with `config` on a device that never runs out.
    pub fn new(config: AllocatorConfig) -> Self {
        Self::with_device(config, SimDevice::unlimited())
    }
}

impl<D: Device> CachingAllocator<D> {
    /// A fresh allocator with `config` on `device`, limited to the
    /// settings' `per_process_memory_fraction` of the device's memory as
    /// `DeviceCachingAllocator`'s constructor limits it.
    pub fn with_device(config: AllocatorConfig, device: D) -> Self {
        let stats = DeviceStats {
            max_split_size: if config.max_split_size == u64::MAX {
                -1
            } else {
                config.max_split_size as i64
            },
            ..DeviceStats::default()
        };
        let fraction = config.per_process_memory_fraction;
        let malloc_async = config.backend_malloc_async.then(AsyncPool::default);
        let mut a = Self {
            config,
            device,
            blocks: Vec::new(),
            free_ids: Vec::new(),
            pools: [Pool::default(), Pool::default()],
            allocated: AddrMap::default(),
            index_addresses: true,
            figures_only: false,
            stream_uses: IdMap::default(),
            events: Vec::new(),
            captures_underway: 0,
            deferred: Vec::new(),
            capture_clocks: IdMap::default(),
            capture_events: IdMap::default(),
            graph_stream_uses: IdMap::default(),
            event_policy: EventPolicy::CompleteAtNextMalloc,
            segments: Vec::new(),
            live_segments: Vec::new(),
            total_allocated_memory: 0,
            allowed_memory_maximum: 0,
            set_fraction: false,
            stats,
            trace: None,
            fits: None,
            fits_spare: Vec::new(),
            kept_streams: Vec::new(),
            private_pools: IdMap::default(),
            no_split_pools: Vec::new(),
            use_on_oom_pools: SkaSet::default(),
            malloc_async,
        };
        // (the cudaMallocAsync backend never reads the setting: its limit is
        // `UINT64_MAX` until `setMemoryFraction`, `lazy_init_device`)
        if a.malloc_async.is_none() {
            a.set_memory_fraction(fraction);
        }
        a
    }

    /// This allocator without `allocated_blocks`, its index of the blocks
    /// handed out by address: for a caller that frees every block by its
    /// [`Handle`] (a replay of recorded requests), to whom the index is pure
    /// cost (a hash insert per malloc and a removal per free). Nothing else
    /// changes: the index decides nothing, it only finds a block from an
    /// address. [`Self::free`] and [`Self::record_stream`] then fail with
    /// [`AllocError::InvalidPointer`]. Call it on a fresh allocator.
    pub fn without_address_index(mut self) -> Self {
        debug_assert_eq!(self.stats.allocation.all().current, 0);
        self.index_addresses = false;
        self
    }

    /// This allocator without the address index
    /// ([`Self::without_address_index`]), keeping only the statistics a
    /// replay's figures read: `allocated_bytes`, `reserved_bytes`,
    /// `requested_bytes`, `segment`, the oversize, retry and device-call
    /// counts. The count of allocations (`allocation`), the inactive-split
    /// statistics (`inactive_split`, `inactive_split_bytes`) and the count
    /// of active blocks (`active`, read off `allocation`) stay at zero;
    /// nothing else changes (no statistic decides anything). Without the
    /// index no block can be used on another stream
    /// ([`Self::record_stream`] fails), the one case where the active
    /// statistics would be kept apart, from the allocation count. For a
    /// caller that reads the figures alone (a sweep's replays), to whom the
    /// rest is pure cost (`docs/performance.md`). Call it on a fresh
    /// allocator.
    pub fn figures_only(self) -> Self {
        let mut a = self.without_address_index();
        a.figures_only = true;
        a
    }

    /// Become a fresh allocator with the same settings on `device`, as
    /// [`Self::with_device`] makes one (and without the address index, or
    /// keeping the figures only, if this one did), keeping the capacity of its block table, free
    /// sets and recorded fits: a caller that replays many runs one after another saves their
    /// regrowth.
    pub fn renew(&mut self, device: D) {
        let mut blocks = std::mem::take(&mut self.blocks);
        blocks.clear();
        let mut free_ids = std::mem::take(&mut self.free_ids);
        free_ids.clear();
        let mut pools = std::mem::take(&mut self.pools);
        for p in &mut pools {
            p.blocks.clear();
        }
        let index_addresses = self.index_addresses;
        let figures_only = self.figures_only;
        let fits_spare = match self.fits.take() {
            Some((buf, _)) => buf,
            None => std::mem::take(&mut self.fits_spare),
        };
        let fresh = Self::with_device(self.config.clone(), device);
        *self = Self {
            blocks,
            free_ids,
            pools: [
                Pool {
                    blocks: std::mem::take(&mut pools[0].blocks),
                    changes: pools[0].changes + 1,
                    ..Pool::default()
                },
                Pool {
                    blocks: std::mem::take(&mut pools[1].blocks),
                    changes: pools[1].changes + 1,
                    ..Pool::default()
                },
            ],
            index_addresses,
            figures_only,
            fits_spare,
            ..fresh
        };
    }

    /// [`Self::renew`] on the device `recycle` makes of this one's (such
    /// as [`crate::SimDevice::recycled`], which keeps its buffers too).
    pub fn renew_recycling(&mut self, recycle: impl FnOnce(&mut D) -> D) {
        let device = recycle(&mut self.device);
        self.renew(device);
    }

    /// The settings in force.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }
    /// `torch._C._accelerator_setAllocatorSettings(env)` at run time
    /// ([`AllocatorConfig::apply`]). Every rule reads the settings when it
    /// runs, as `CUDACachingAllocator.cpp` reads `AcceleratorAllocatorConfig`:
    /// segments already made stay as they are (an expandable one keeps its
    /// pages and, while `expandable_segments` is off, takes no new request,
    /// `get_free_block`); new ones follow the new settings. The statistic
    /// `max_split_size` stays the one of the allocator's start (set in
    /// `DeviceCachingAllocator`'s constructor only), and so does the limit:
    /// `per_process_memory_fraction` here changes the setting alone. On
    /// error the settings before the bad token stay applied, as in PyTorch.
    pub fn set_allocator_settings(&mut self, env: &str) -> Result<(), crate::ConfigError> {
        if let Some((_, other_rule)) = self.fits.as_mut() {
            // the fits recorded so far were made under other settings
            *other_rule = true;
        }
        self.config.apply(env)
    }
    /// Whether an expandable segment is live (made while
    /// `expandable_segments` was on; it may be off now).
    fn any_expandable_segment(&self) -> bool {
        !self.live_segments.is_empty()
    }
    /// The device underneath.
    pub fn device(&self) -> &D {
        &self.device
    }
    /// The device underneath, mutably (replays feed it addresses).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }
    /// Choose when cross-stream frees complete.
    pub fn set_event_policy(&mut self, policy: EventPolicy) {
        self.event_policy = policy;
    }
    /// Start (or stop) recording trace entries, as
    /// `torch.cuda.memory._record_memory_history()`.
    pub fn record_history(&mut self, enabled: bool) {
        self.trace = if enabled { Some(Vec::new()) } else { None };
    }
    /// Whether trace entries are being recorded.
    pub fn recording_history(&self) -> bool {
        self.trace.is_some()
    }
    /// The trace recorded so far.
    pub fn trace(&self) -> &[TraceEntry] {
        self.trace.as_deref().unwrap_or(&[])
    }
    /// Take the trace recorded so far, leaving it empty.
    pub fn take_trace(&mut self) -> Vec<TraceEntry> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }
    /// Start recording the best fit of every malloc (its [`Fit`]), for
    /// [`Self::repeats_with_its_segments`]; drops what was recorded.
    pub fn record_fits(&mut self) {
        let mut buf = std::mem::take(&mut self.fits_spare);
        if let Some((old, _)) = self.fits.take() {
            buf = old;
        }
        buf.clear();
        self.fits = Some((buf, false));
    }
    /// Stop recording fits, and whether the mallocs recorded, made again
    /// in the same order from the state they started in plus the segments
    /// they created, would take the same blocks and create none
    /// ([`crate::fits::repeats_with_its_segments`]; `false` when nothing
    /// was recorded). Only when best fit and segment creation alone decided:
    /// no oversize limit (`max_split_size`), no expandable segments, no
    /// garbage collection, no block used on another stream, and no segment
    /// released since recording began (a release changes what is there).
    pub fn repeats_with_its_segments(&mut self, device_frees_at_start: i64) -> bool {
        let Some((fits, other_rule)) = self.fits.take() else {
            return false;
        };
        let best_fit_alone = self.config.allows(crate::Shortcut::RepeatedFits)
            && !self.any_expandable_segment()
            && !other_rule
            && self.stats.num_device_free == device_frees_at_start;
        let repeats = best_fit_alone && crate::fits::repeats_with_its_segments(&fits);
        self.fits_spare = fits;
        repeats
    }
    /// The native allocator's statistics, as the twin keeps them under
    /// either backend ([`Self::reported_stats`]: what `memory_stats()`
    /// returns).
    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }
    /// `memory_stats()`: [`Self::stats`], or under `backend:cudaMallocAsync`
    /// its pool's used and reserved memory alone (`malloc_async.rs`).
    pub fn reported_stats(&self) -> Cow<'_, DeviceStats> {
        match &self.malloc_async {
            None => Cow::Borrowed(&self.stats),
            Some(p) => Cow::Owned(p.stats(&self.stats.requested_bytes)),
        }
    }
    /// The device's stream pools are made (the first side stream): under
    /// `backend:cudaMallocAsync` they are its first allocation's memory
    /// beyond the pool (`malloc_async.rs`), marked taken, and `true`;
    /// `false` under the native allocator (the caller takes them).
    pub fn stream_pools_async(&mut self) -> bool {
        match self.malloc_async.as_mut() {
            Some(p) => {
                p.init();
                true
            }
            None => false,
        }
    }
    /// Whether this is `backend:cudaMallocAsync`'s allocator.
    pub fn is_malloc_async(&self) -> bool {
        self.malloc_async.is_some()
    }
    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&mut self) {
        if let Some(p) = self.malloc_async.as_mut() {
            p.reset_peak(&self.stats.requested_bytes);
        }
        self.stats.reset_peak();
    }
    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&mut self) {
        self.stats.reset_accumulated();
    }
    /// Bytes of device memory held (`total_allocated_memory`).
    pub fn total_allocated_memory(&self) -> u64 {
        self.total_allocated_memory
    }
    /// `cudaMemGetInfo`: (free, total) bytes. Under `backend:cudaMallocAsync`
    /// the driver's pool holds its reserved memory in place of the twin's
    /// segments (release threshold `UINT64_MAX`, `lazy_init_device`: freed
    /// memory stays mapped until a trim; the H200's used memory grew by the
    /// pool's 96 MiB, session 60's ma60_malloc_async.py), and the first
    /// allocation's memory beyond the pool (`malloc_async.rs`).
    pub fn mem_info(&self) -> (u64, u64) {
        let (free, total) = self.device.mem_info();
        match &self.malloc_async {
            None => (free, total),
            Some(p) => (
                (free + self.total_allocated_memory).saturating_sub(p.device_bytes()),
                total,
            ),
        }
    }
    /// `torch.cuda.set_per_process_memory_fraction(fraction)`
    /// (`DeviceCachingAllocator::setMemoryFraction`, PyTorch 2.11): below
    /// 1.0 the allocator may hold at most `fraction x` the device's total
    /// memory; 1.0 removes the limit (and with it garbage collection).
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        let (_, total) = self.device.mem_info();
        if let Some(p) = self.malloc_async.as_mut() {
            // `CudaMallocAsyncAllocator::setMemoryFraction`: a limit on the
            // bytes requested, 1.0 included
            p.limit = Some((fraction * total as f64) as u64);
            return;
        }
        self.set_fraction = fraction < 1.0;
        self.allowed_memory_maximum = if self.set_fraction {
            (fraction * total as f64) as u64
        } else {
            0
        };
    }
    /// `torch.cuda.get_per_process_memory_fraction()` (`getMemoryFraction`):
    /// the limit over the device's total memory, 1.0 without one.
    pub fn memory_fraction(&self) -> f64 {
        if let Some(p) = &self.malloc_async {
            // `getMemoryFraction`: `pytorch_memory_limits` over the total,
            // `UINT64_MAX` before any `setMemoryFraction`
            return p.limit.unwrap_or(u64::MAX) as f64 / self.device.mem_info().1 as f64;
        }
        match self.allowed_memory_maximum() {
            Some(max) => max as f64 / self.device.mem_info().1 as f64,
            None => 1.0,
        }
    }
    /// The limit set by [`Self::set_memory_fraction`], if any.
    pub fn allowed_memory_maximum(&self) -> Option<u64> {
        self.set_fraction.then_some(self.allowed_memory_maximum)
    }

    #[inline]
    fn record(&mut self, action: TraceAction, addr: u64, size: u64, stream: u64) {
        if let Some(t) = self.trace.as_mut() {
            t.push(TraceEntry {
                action,
                addr,
                size,
                stream,
            });
        }
    }

    // ---- block bookkeeping -------------------------------------------------

    fn new_block(&mut self, addr: u64, size: u64, stream: u64, small: bool, seg: Id) -> Id {
        let b = Block {
            addr,
            size,
            requested_size: 0,
            stream,
            small,
            allocated: false,
            mapped: true,
            prev: NIL,
            next: NIL,
            event_count: 0,
            has_stream_uses: false,
            gc_count_base: 0,
            seg,
        };
        if let Some(id) = self.free_ids.pop() {
            self.blocks[id as usize] = b;
            id
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as Id
        }
    }
    fn delete_block(&mut self, id: Id) {
        self.blocks[id as usize].size = 0;
        self.free_ids.push(id);
    }
    #[inline]
    fn b(&self, id: Id) -> &Block {
        &self.blocks[id as usize]
    }
    #[inline]
    fn bm(&mut self, id: Id) -> &mut Block {
        &mut self.blocks[id as usize]
    }
    fn ukey(&self, id: Id) -> (u64, u64, Id) {
        let b = self.b(id);
        (b.stream, b.addr, id)
    }
    fn is_split(&self, id: Id) -> bool {
        let b = self.b(id);
        b.prev != NIL || b.next != NIL
    }
    /// `BlockPool::insert_into_blocks`.
    fn insert_into_blocks(&mut self, id: Id) {
        let p = pool_index(self.b(id).small);
        let base = self.pools[p].get_free_blocks_call_count;
        self.bm(id).gc_count_base = base;
        let b = &self.blocks[id as usize];
        self.pools[p].blocks.insert(b.stream, b.size, b.addr, id);
        self.pools[p].changes += 1;
    }
    fn remove_from_blocks(&mut self, id: Id) {
        let b = &self.blocks[id as usize];
        let pool = &mut self.pools[pool_index(b.small)];
        pool.blocks.remove(b.stream, b.size, b.addr, id);
        pool.changes += 1;
    }
    fn gc_count(&self, id: Id) -> u64 {
        let b = self.b(id);
        self.pools[pool_index(b.small)].get_free_blocks_call_count - b.gc_count_base
    }
    /// `Block::splice`: put `id` between `before` and `after`.
    fn splice(&mut self, id: Id, before: Id, after: Id) {
        if before != NIL {
            self.bm(before).next = id;
        }
        self.bm(id).prev = before;
        if after != NIL {
            self.bm(after).prev = id;
        }
        self.bm(id).next = after;
    }

    // ---- sizes ---------------------------------------------------------------

    /// `round_size`: 512-byte multiples, or the next power-of-two division.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let divisions = self.config.roundup_divisions_for(size);
        if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            MIN_BLOCK_SIZE * size.div_ceil(MIN_BLOCK_SIZE)
        }
    }

    // ---- public operations ----------------------------------------------------

    /// `DeviceCachingAllocator::malloc(size, stream)`.
    pub fn malloc(&mut self, orig_size: u64, stream: StreamId) -> Result<Addr, OutOfMemory> {
        self.malloc_handle(orig_size, stream).map(|h| h.addr)
    }

    /// [`Self::malloc`], returning the block's [`Handle`].
    #[inline]
    pub fn malloc_handle(
        &mut self,
        orig_size: u64,
        stream: StreamId,
    ) -> Result<Handle, OutOfMemory> {
        if self.malloc_async.is_some() {
            self.async_limit(orig_size)?;
        }
        self.process_events_unless_capturing(stream);
        let size = self.round_size(orig_size);
        let small = size <= SMALL_SIZE;

        // First, try to get a block from the existing pool (no free-memory
        // callbacks free anything outside CUDA IPC, so the retry is moot).
        let found = self.get_free_block(small, stream, size, self.config.expandable_segments);
        self.malloc_after_search(found, orig_size, size, small, stream)
    }

    /// The rest of `malloc` once `get_free_block` has answered `found`.
    #[inline]
    fn malloc_after_search(
        &mut self,
        mut found: Option<Id>,
        orig_size: u64,
        size: u64,
        small: bool,
        stream: StreamId,
    ) -> Result<Handle, OutOfMemory> {
        let from_pool = found.is_some();
        let mut from_mempool = false;
        if found.is_none() {
            // (PyTorch computes it before the search; a function of the
            // size alone, it is needed only when the pool has no block, so
            // computed here: fewer mispredicted branches)
            let alloc_size = get_allocation_size(size, self.config.large_segment_size);
            if self.set_fraction && self.config.garbage_collection_threshold > 0.0 {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(small, stream, size, alloc_size, false);
            if found.is_none() {
                // `try_mempool_fallback`, before any cached block is freed
                if let Some(id) = self.try_mempool_fallback(small, stream, size) {
                    found = Some(id);
                    from_mempool = true;
                }
            }
            if found.is_none() {
                match self.release_available_cached_blocks(small, stream, size) {
                    Ok(true) => found = self.alloc_block(small, stream, size, alloc_size, false),
                    Ok(false) => {}
                    Err(()) => return Err(self.cuda_error("invalid argument", size)),
                }
            }
            // `C10_LIKELY(captures_underway.empty()) && release_cached_blocks(..)`: not while a
            // capture or `use_mem_pool` is underway
            if found.is_none() && self.captures_underway == 0 {
                self.release_cached_blocks();
                found = self.alloc_block(small, stream, size, alloc_size, true);
            }
        }
        let Some(id) = found else {
            let (device_free, device_total) = self.device.mem_info();
            self.record(TraceAction::Oom, device_free, size, stream);
            self.stats.num_ooms += 1;
            let used = self.stats.requested_bytes.all().current as u64;
            return Err(OutOfMemory {
                // (the driver's pool runs out where the twin's segments do:
                // unmeasured)
                malloc_async: self.malloc_async.as_ref().map(|p| p.oom(used, orig_size)),
                ..self.failure(size, device_free, device_total)
            });
        };
        if let Some((fits, other_rule)) = self.fits.as_mut() {
            let b = &self.blocks[id as usize];
            fits.push(Fit {
                stream,
                small,
                size,
                block: crate::fits::BlockKey {
                    size: b.size,
                    address: b.addr,
                },
                new_segment: !from_pool && !from_mempool,
            });
            *other_rule |= from_mempool;
        }
        // (`mempool_params` of the fallback: expandable segments not active)
        let split = self.should_split(id, size, self.config.expandable_segments && !from_mempool);
        // the block keeps its pool's stream (a fallback's: the pool's)
        let stream = self.b(id).stream;
        Ok(self.alloc_found_block(id, size, orig_size, stream, split))
    }

    /// [`Self::malloc_handle`] of a small request when the caller knows that
    /// no free block of the small pool fits it (it keeps the pool apart,
    /// [`Self::small_pool`]): the rest of `malloc` after `get_free_block`
    /// found nothing (garbage collection, a new segment, the frees and
    /// retries of an allocation that fails). This allocator's own small
    /// pool is left as it was, but for the new segment.
    pub fn malloc_in_new_segment(
        &mut self,
        orig_size: u64,
        stream: StreamId,
    ) -> Result<Handle, OutOfMemory> {
        if self.malloc_async.is_some() {
            self.async_limit(orig_size)?;
        }
        self.process_events_unless_capturing(stream);
        let size = self.round_size(orig_size);
        let small = size <= SMALL_SIZE;
        if self.set_fraction && self.config.garbage_collection_threshold > 0.0 {
            // (`get_free_block`'s count of its calls)
            self.count_get_free_block(pool_index(small), stream);
        }
        self.malloc_after_search(None, orig_size, size, small, stream)
    }

    /// The small pool of `stream` apart ([`SmallPool`]), or `None` where it
    /// is not plain: expandable segments, a block of another stream, events
    /// outstanding or a block used on another stream.
    pub fn small_pool(&self, stream: StreamId) -> Option<SmallPool> {
        if self.config.expandable_segments
            || self.any_expandable_segment()
            || self.config.max_split_size <= SMALL_BUFFER
            || !self.events.is_empty()
            || !self.stream_uses.is_empty()
            || self.no_split_stream(stream)
        {
            return None;
        }
        let mut segments = Vec::new();
        let mut free = Vec::new();
        for (i, h) in self.blocks.iter().enumerate() {
            if h.size == 0 || !h.small || h.prev != NIL {
                continue;
            }
            // a segment's first block: walk it
            let seg = segments.len() as u32;
            let (mut cur, mut total) = (i as Id, 0);
            while cur != NIL {
                let b = self.b(cur);
                if b.stream != stream || b.seg != NIL || b.event_count > 0 || b.has_stream_uses {
                    return None;
                }
                if !b.allocated {
                    free.push(crate::smallpool::FreeBlock {
                        size: u32::try_from(b.size).ok()?,
                        addr: b.addr,
                        segment: seg,
                    });
                }
                total += b.size;
                cur = b.next;
            }
            segments.push((h.addr, total));
        }
        SmallPool::new(&segments, free)
    }

    /// The large pool of `stream` apart ([`LargePool`]), or `None` where it
    /// is not plain: expandable segments, an oversize limit, garbage
    /// collection, events outstanding, a block used on another stream or of
    /// another stream, history or fits recorded.
    pub fn large_pool(&self, stream: StreamId) -> Option<LargePool> {
        if self.config.expandable_segments
            || self.any_expandable_segment()
            || self.config.max_split_size != u64::MAX
            || self.config.garbage_collection_threshold > 0.0
            || !self.events.is_empty()
            || !self.stream_uses.is_empty()
            || self.trace.is_some()
            || self.fits.is_some()
            || self.no_split_stream(stream)
        {
            return None;
        }
        let mut segments = Vec::new();
        for h in &self.blocks {
            if h.size == 0 || h.small || h.prev != NIL {
                continue;
            }
            // a segment's first block: walk it
            let mut seg = Vec::new();
            let mut cur = h.next;
            let mut b = h;
            loop {
                if b.stream != stream || b.seg != NIL || b.event_count > 0 || b.has_stream_uses {
                    return None;
                }
                seg.push((b.addr, b.size, b.allocated, b.requested_size));
                if cur == NIL {
                    break;
                }
                b = self.b(cur);
                cur = b.next;
            }
            segments.push(seg);
        }
        LargePool::new(&segments)
    }

    /// `DeviceCachingAllocator::free`.
    pub fn free(&mut self, addr: Addr) -> Result<(), AllocError> {
        let blocks = &self.blocks;
        let id = self
            .allocated
            .remove(addr, |id| blocks[id as usize].addr)
            .ok_or(AllocError::InvalidPointer(addr))?;
        self.free_allocated(id);
        Ok(())
    }

    /// [`Self::free`] of the block `malloc_handle` returned `h` for.
    #[inline]
    pub fn free_handle(&mut self, h: Handle) -> Result<(), AllocError> {
        if !self.handed_out(h) {
            return Err(AllocError::InvalidPointer(h.addr));
        }
        if self.index_addresses {
            let blocks = &self.blocks;
            self.allocated.remove(h.addr, |id| blocks[id as usize].addr);
        }
        self.free_allocated(h.id);
        Ok(())
    }

    /// Whether `h` names a block this allocator handed out and has not had back.
    fn handed_out(&self, h: Handle) -> bool {
        self.blocks
            .get(h.id as usize)
            .is_some_and(|b| b.allocated && b.size > 0 && b.addr == h.addr)
    }

    /// The rest of `free`, once the block is out of `allocated_blocks`.
    #[inline]
    fn free_allocated(&mut self, id: Id) {
        let addr = self.b(id).addr;
        let (size, small, requested, stream) = {
            let b = self.bm(id);
            b.allocated = false;
            (b.size, b.small, b.requested_size, b.stream)
        };
        if !self.figures_only {
            self.stats.allocation.decrease(small, 1);
        }
        self.stats.allocated_bytes.decrease(small, size);
        self.record(TraceAction::FreeRequested, addr, requested, stream);
        if size >= self.config.max_split_size {
            self.stats.oversize_allocations.decrease(1);
        }
        if self.b(id).has_stream_uses {
            if let Some(p) = self.malloc_async.as_mut() {
                // `freeAsync`: `pytorch_used_bytes` (and the pool's used memory) drop at the free;
                // the unifying stream's events only order the memory's reuse
                p.free(addr);
                self.stats.requested_bytes.decrease(small, requested);
                self.bm(id).requested_size = 0;
            }
            // an event recorded during a capture cannot be queried: its block
            // waits for the first `process_events` after the capture
            if self.captures_underway > 0 {
                let markers = if self.config.graph_capture_record_stream_reuse {
                    self.record_free_markers(id)
                } else {
                    // without graph_capture_record_stream_reuse, always until the capture's end
                    None
                };
                self.deferred.push((id, markers));
            } else {
                self.insert_events(id);
            }
        } else {
            self.free_block(id);
        }
    }

    /// `beginAllocateToPool` (a CUDA graph's `capture_begin`, `use_mem_pool`):
    /// until the matching [`Self::end_allocate_to_pool`], `malloc` skips
    /// `process_events` and a block freed with stream uses waits.
    pub fn begin_allocate_to_pool(&mut self) {
        self.captures_underway += 1;
    }

    /// `endAllocateToPool` (`capture_end`, the end of `use_mem_pool`).
    pub fn end_allocate_to_pool(&mut self) {
        self.captures_underway = self.captures_underway.saturating_sub(1);
    }

    /// `cudaStreamBeginCapture` on `stream`: it is capturing, with no node yet.
    pub fn capture_stream_begin(&mut self, stream: u64) {
        self.capture_clocks.insert(stream, vec![(stream, 0)]);
    }

    /// A node captured on `stream` (an op launched on it while capturing).
    pub fn capture_stream_op(&mut self, stream: u64) {
        if let Some(c) = self.capture_clocks.get_mut(&stream) {
            match c.iter_mut().find(|e| e.0 == stream) {
                Some(e) => e.1 += 1,
                None => c.push((stream, 1)),
            }
        }
    }

    /// `cudaEventRecord(event, stream)`: the event stands for `stream`'s
    /// captured work so far (nothing where `stream` is not capturing).
    pub fn capture_event_record(&mut self, event: u64, stream: u64) {
        match self.capture_clocks.get(&stream) {
            Some(c) => {
                let c = c.clone();
                self.capture_events.insert(event, c);
            }
            None => {
                self.capture_events.remove(&event);
            }
        }
    }

    /// `cudaStreamWaitEvent(stream, event)`: `stream`'s later work follows
    /// the event's; a stream not capturing joins the capture.
    pub fn capture_event_wait(&mut self, stream: u64, event: u64) {
        if let Some(e) = self.capture_events.get(&event) {
            let e = e.clone();
            clock_merge(self.capture_clocks.entry(stream).or_default(), &e);
        }
    }

    /// `cudaStreamEndCapture` on the capture's origin `stream`: it and every
    /// stream joined into its capture stop capturing.
    pub fn capture_stream_end(&mut self, stream: u64) {
        let joined = |c: &Clock| c.iter().any(|e| e.0 == stream);
        self.capture_clocks.retain(|_, c| !joined(c));
        self.capture_events.retain(|_, c| !joined(c));
    }

    /// `recordStream`: the block at `addr` is used on `stream` too.
    pub fn record_stream(&mut self, addr: Addr, stream: StreamId) -> Result<(), AllocError> {
        let blocks = &self.blocks;
        let id = self
            .allocated
            .get(addr, |id| blocks[id as usize].addr)
            .ok_or(AllocError::InvalidPointer(addr))?;
        self.record_stream_of(id, stream);
        Ok(())
    }

    /// [`Self::record_stream`] of the block `malloc_handle` returned `h` for
    /// (an allocator without the address index takes it too; one of
    /// figures only does not, as [`Self::figures_only`] says).
    pub fn record_stream_handle(&mut self, h: Handle, stream: StreamId) -> Result<(), AllocError> {
        if !self.handed_out(h) || self.figures_only {
            return Err(AllocError::InvalidPointer(h.addr));
        }
        self.record_stream_of(h.id, stream);
        Ok(())
    }

    /// The rest of `recordStream`, once the block is found.
    fn record_stream_of(&mut self, id: Id, stream: StreamId) {
        // Uses on the allocation stream need no synchronization.
        if stream != self.b(id).stream {
            if let Some((_, other_rule)) = self.fits.as_mut() {
                *other_rule = true;
            }
            self.stats.keep_active_apart();
            let uses = self.stream_uses.entry(id as u64).or_default();
            if !uses.contains(&stream) {
                uses.push(stream);
            }
            self.bm(id).has_stream_uses = true;
            if self.captures_underway > 0 {
                let graph = self.graph_stream_uses.entry(id as u64).or_default();
                if !graph.contains(&stream) {
                    graph.push(stream);
                }
            }
        }
    }

    /// Complete the outstanding events of the freed block at `addr` (used with
    /// [`EventPolicy::Manual`]): the free completes now.
    pub fn complete_events(&mut self, addr: Addr) -> bool {
        let ids: Vec<usize> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, (_, id))| self.b(*id).addr == addr && self.b(*id).event_count > 0)
            .map(|(i, _)| i)
            .collect();
        if ids.is_empty() {
            return false;
        }
        for i in ids.into_iter().rev() {
            let (_, id) = self.events.remove(i);
            self.bm(id).event_count -= 1;
            if self.b(id).event_count == 0 {
                self.free_block(id);
            }
        }
        true
    }

    /// `torch.cuda.empty_cache()`: `release_cached_blocks`.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
        if let Some(p) = self.malloc_async.as_mut() {
            // `cudaMemPoolTrimTo(pool, 0)`
            p.trim(&self.stats.requested_bytes);
            self.stats.requested_bytes.reset_peak();
        }
    }

    /// `mallocAsync`'s check before the driver is asked: over the limit of
    /// `set_per_process_memory_fraction`, an out-of-memory error.
    #[cold]
    fn async_limit(&mut self, orig_size: u64) -> Result<(), OutOfMemory> {
        let used = self.stats.requested_bytes.all().current as u64;
        let Some(oom) = self.malloc_async.as_mut().and_then(|p| {
            // `lazy_init_device` runs before the check
            p.init();
            p.over_limit(used, orig_size)
        }) else {
            return Ok(());
        };
        let (device_free, device_total) = self.mem_info();
        Err(OutOfMemory {
            alloc_size: orig_size,
            device_total,
            device_free,
            allowed: None,
            allocated_bytes: used,
            reserved_bytes: used,
            malloc_async: Some(oom),
            cuda_error: None,
        })
    }

    /// `emptyCache(mempool_id)` of a private pool nothing holds any more (`~MemPool`: `releasePool`,
    /// then `emptyCache(id_)`, MemPool.cpp): `release_cached_blocks` with a pool's id frees that
    /// pool's unsplit cached blocks alone (its `small_blocks`, then its `large_blocks`), not the
    /// default pools'. `streams`: the pool's blocks' streams.
    pub fn empty_cache_of(&mut self, streams: &[u64]) {
        self.kept_streams.retain(|s| !streams.contains(s));
        self.release_blocks_of(true, Some(streams));
        self.release_blocks_of(false, Some(streams));
    }

    /// Whether `release_cached_blocks` (empty_cache, and malloc's retry
    /// after an out-of-memory) leaves `stream`'s cached blocks alone: a CUDA
    /// graph's private pool while its graph lives (`release_cached_blocks`
    /// frees only the pools in `graph_pools_freeable`).
    pub fn keep_through_empty_cache(&mut self, stream: u64, keep: bool) {
        self.kept_streams.retain(|&s| s != stream);
        if keep {
            self.kept_streams.push(stream);
        }
    }

    /// A private pool's stream: the twin keeps the blocks private pool `pool`
    /// (its `MempoolIdHash`: the id's first element, or its second where the
    /// first is 0) allocates on `stream` under the stream id `private`
    /// (`BlockComparatorSize` orders a pool's blocks by stream first).
    pub fn register_private_stream(&mut self, private: u64, pool: u64, stream: u64) {
        self.private_pools.insert(private, (pool, stream));
    }

    /// `setNoSplit(mempool_id)` (`MemPool(no_split=True)`, MemPool.cpp): no
    /// block of the pool is ever split (`should_split`).
    pub fn set_no_split(&mut self, pool: u64) {
        if !self.no_split_pools.contains(&pool) {
            self.no_split_pools.push(pool);
        }
    }

    /// `setUseOnOOM(mempool_id, use_on_oom)` (`MemPool(use_on_oom=True)`;
    /// `~MemPool` turns it off): a request outside any private pool that
    /// `cudaMalloc` cannot serve may take a free block of the pool
    /// (`try_mempool_fallback`).
    pub fn set_use_on_oom(&mut self, pool: u64, use_on_oom: bool) {
        if use_on_oom {
            self.use_on_oom_pools.insert(pool);
        } else {
            self.use_on_oom_pools.remove(pool);
        }
    }

    /// Whether `stream` keys the blocks of a `no_split` pool.
    fn no_split_stream(&self, stream: u64) -> bool {
        !self.no_split_pools.is_empty()
            && self
                .private_pools
                .get(&stream)
                .is_some_and(|(pool, _)| self.no_split_pools.contains(pool))
    }

    /// `try_mempool_fallback` (CUDACachingAllocator.cpp, PyTorch 2.11), run
    /// when `alloc_block` first fails and before any cached block is freed: a
    /// request not already going to a private pool tries each `use_on_oom`
    /// pool in turn (`beginAllocateToPool`, `get_pool`, then
    /// `get_free_block` alone, with expandable segments inactive: no new
    /// segment is made in the pool); the first free block found is taken.
    fn try_mempool_fallback(&mut self, small: bool, stream: u64, size: u64) -> Option<Id> {
        if self.use_on_oom_pools.is_empty()
            || self.private_pools.contains_key(&stream)
            || self.kept_streams.contains(&stream)
        {
            return None;
        }
        let pools: Vec<u64> = self.use_on_oom_pools.iter().collect();
        for pool in pools {
            // the pool's blocks of this stream (none where it never allocated on it)
            let private = self
                .private_pools
                .iter()
                .find(|(_, &(p, s))| p == pool && s == stream)
                .map(|(&k, _)| k);
            if let Some(private) = private {
                if let Some(id) = self.get_free_block(small, private, size, false) {
                    return Some(id);
                }
            }
        }
        None
    }

    /// `snapshot()`: segments and blocks as a memory snapshot reports them,
    /// sorted by address.
    pub fn snapshot(&self) -> Vec<SegmentInfo> {
        let mut out = Vec::new();
        for (i, h) in self.blocks.iter().enumerate() {
            let id = i as Id;
            if h.size == 0 || !h.mapped || self.free_ids.contains(&id) {
                continue;
            }
            if h.prev != NIL && self.b(h.prev).mapped {
                continue;
            }
            let mut seg = SegmentInfo {
                address: h.addr,
                total_size: 0,
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                stream: h.stream,
                is_large: !h.small,
                is_expandable: h.seg != NIL,
                blocks: Vec::new(),
            };
            let mut cur = id;
            while cur != NIL && self.b(cur).mapped {
                let b = self.b(cur);
                let active = b.allocated || b.event_count > 0 || b.has_stream_uses;
                seg.total_size += b.size;
                if b.allocated {
                    seg.allocated_size += b.size;
                }
                if active {
                    seg.active_size += b.size;
                    seg.requested_size += b.requested_size;
                }
                seg.blocks.push(BlockInfo {
                    address: b.addr,
                    size: b.size,
                    requested_size: b.requested_size,
                    allocated: b.allocated,
                    active,
                });
                cur = b.next;
            }
            out.push(seg);
        }
        out.sort_by_key(|s| s.address);
        out
    }

    /// Number of free cached blocks in each pool.
    pub fn free_block_counts(&self) -> FreeBlocks {
        FreeBlocks {
            small: self.pools[0].blocks.len(),
            large: self.pools[1].blocks.len(),
        }
    }

    /// `cacheInfo`: the largest free cached block.
    pub fn largest_free_block(&self) -> u64 {
        self.pools
            .iter()
            .filter_map(|p| p.blocks.max_size())
            .max()
            .unwrap_or(0)
    }

    // ---- internals, as in CUDACachingAllocator.cpp -----------------------------

    /// `malloc`'s `process_events`, which it skips while a capture is
    /// underway (its event queries are illegal then).
    fn process_events_unless_capturing(&mut self, stream: u64) {
        if self.captures_underway == 0 {
            self.process_events();
        } else if self.config.graph_capture_record_stream_reuse {
            // "We check if there is some block that is safe to reuse on this stream"
            let stream = self.cuda_stream_of(stream);
            self.free_safe_blocks_in_capture(stream);
        }
    }

    /// The stream a request keyed by `stream` runs on (a private pool's
    /// stream id names the stream its blocks are allocated on).
    fn cuda_stream_of(&self, stream: u64) -> u64 {
        self.private_pools.get(&stream).map_or(stream, |&(_, s)| s)
    }

    /// `record_free_markers`: the current terminal nodes of the capture on
    /// the block's stream and on every stream it was used on, as one clock;
    /// `None` (wait for the capture's end) where one of them is not
    /// capturing, or where none has captured a node yet (no marker).
    fn record_free_markers(&self, id: Id) -> Option<Clock> {
        let mut markers = Clock::new();
        let own = self.cuda_stream_of(self.b(id).stream);
        let uses = self.stream_uses.get(&(id as u64));
        for s in std::iter::once(own).chain(uses.into_iter().flatten().copied()) {
            clock_merge(&mut markers, self.capture_clocks.get(&s)?);
        }
        markers.iter().any(|&(_, n)| n > 0).then_some(markers)
    }

    /// `free_safe_blocks_in_capture(stream)`: a deferred block of `stream`
    /// whose free markers every terminal node of the capture on `stream`
    /// follows (`update_visited`'s reverse walk) is free again, its stream
    /// uses cleared (the graph orders them), with no event.
    fn free_safe_blocks_in_capture(&mut self, stream: u64) {
        let Some(now) = self.capture_clocks.get(&stream) else {
            return;
        };
        if now.iter().all(|&(_, n)| n == 0) {
            // no terminal node yet
            return;
        }
        let mut safe = Vec::new();
        for (i, (id, markers)) in self.deferred.iter().enumerate() {
            if let Some(m) = markers {
                if self.cuda_stream_of(self.b(*id).stream) == stream && clock_le(m, now) {
                    safe.push(i);
                }
            }
        }
        for i in safe.into_iter().rev() {
            let (id, _) = self.deferred.remove(i);
            self.stream_uses.remove(&(id as u64));
            self.graph_stream_uses.remove(&(id as u64));
            self.bm(id).has_stream_uses = false;
            self.free_block(id);
        }
    }

    /// `process_events`: the blocks deferred by a capture get their events,
    /// then outstanding events that have completed free their block.
    fn process_events(&mut self) {
        self.insert_events_deferred_until_no_capture();
        if self.events.is_empty() || self.event_policy == EventPolicy::Manual {
            return;
        }
        self.drain_events();
    }

    /// `insert_events_deferred_until_no_capture`: each deferred block's
    /// events on the streams recorded before the capture (those recorded
    /// during it have finished, `remove_graph_stream_uses`); a block left
    /// with none is freed now.
    fn insert_events_deferred_until_no_capture(&mut self) {
        for (id, _) in std::mem::take(&mut self.deferred) {
            if let Some(graph) = self.graph_stream_uses.remove(&(id as u64)) {
                if let Some(uses) = self.stream_uses.get_mut(&(id as u64)) {
                    uses.retain(|s| !graph.contains(s));
                }
            }
            self.insert_events(id);
            if self.b(id).event_count == 0 {
                self.free_block(id);
            }
        }
    }

    fn drain_events(&mut self) {
        for (_, id) in std::mem::take(&mut self.events) {
            self.bm(id).event_count -= 1;
            if self.b(id).event_count == 0 {
                self.free_block(id);
            }
        }
    }

    /// `synchronize_and_free_events`.
    fn synchronize_and_free_events(&mut self) {
        self.stats.num_sync_all_streams += 1;
        self.insert_events_deferred_until_no_capture();
        self.drain_events();
    }

    /// `insert_events`: one event per stream the block was used on.
    fn insert_events(&mut self, id: Id) {
        let streams = self.stream_uses.remove(&(id as u64)).unwrap_or_default();
        self.graph_stream_uses.remove(&(id as u64));
        self.bm(id).has_stream_uses = false;
        self.bm(id).event_count += streams.len() as u32;
        for s in streams {
            self.events.push((s, id));
        }
    }

    /// A count that changes whenever the free blocks of the small pool
    /// (`small`) or the large pool change (every stream's, from this
    /// allocator's creation, over renewals): while it stays the same, and so
    /// do the events outstanding and the recording of history and fits,
    /// [`Self::fit_for_a_moment`] of a request and open blocks gives the
    /// same answer.
    pub fn free_set_changes(&self, small: bool) -> u64 {
        self.pools[pool_index(small)].changes
    }

    /// The block `malloc_handle(orig_size, stream)` would hand out where a
    /// free block of its pool fits it and the allocation would do nothing
    /// else (no events outstanding, no expandable segments, no oversize
    /// limit, no garbage collection, whose searches are counted, no history
    /// or fits recorded), the blocks of `open` having been handed out
    /// before it the same way and not freed; `None` otherwise. Mallocs so
    /// made and the frees of their blocks in the reverse order, with no
    /// other request of their pool between, leave the pool as it was (but
    /// the requested bytes a free block keeps from its last allocation,
    /// which decide nothing): each takes a free block and splits it at most
    /// once (`alloc_found_block`), and its free merges the two parts back
    /// (`free_block`: a free block has no free neighbour, so the taken
    /// block's others are allocated, or the open blocks' parts).
    pub fn fit_for_a_moment(
        &self,
        orig_size: u64,
        stream: StreamId,
        open: &[Moment],
    ) -> Option<Moment> {
        if !self.events.is_empty()
            || !self.deferred.is_empty()
            || self.config.expandable_segments
            || self.any_expandable_segment()
            || self.config.max_split_size != u64::MAX
            || self.config.garbage_collection_threshold > 0.0
            || self.trace.is_some()
            || self.fits.is_some()
            || self.no_split_stream(stream)
        {
            return None;
        }
        let size = self.round_size(orig_size);
        let small = size <= SMALL_SIZE;
        let pool = &self.pools[pool_index(small)].blocks;
        // (the open blocks of this pool)
        let taken = |k: (u64, Addr)| open.iter().any(|m| m.small == small && m.took == k);
        // the least free block of the pool at or above the size that no open
        // block took, and the least of the parts they left
        let mut c = pool.lower_bound(stream, size);
        let mut found = None;
        while let Some(at) = c {
            let (bytes, addr, id) = pool.get(at);
            if self.b(id).seg != NIL {
                return None;
            }
            if !taken((bytes, addr)) {
                found = Some((bytes, addr));
                break;
            }
            c = pool.next(at);
        }
        for rest in open
            .iter()
            .filter(|m| m.small == small)
            .filter_map(|m| m.rest)
        {
            if rest.0 >= size && !taken(rest) && found.is_none_or(|f| rest < f) {
                found = Some(rest);
            }
        }
        let (bytes, addr) = found?;
        let remaining = bytes - size;
        let split = if small {
            remaining >= MIN_BLOCK_SIZE
        } else {
            remaining > SMALL_SIZE
        };
        Some(Moment {
            bytes: if split { size } else { bytes },
            took: (bytes, addr),
            rest: split.then_some((remaining, addr + size)),
            small,
        })
    }

    /// `get_free_block`: best fit by (stream, size, address);
    /// `expandable_active`: `AllocParams::is_expandable_segments_active`.
    fn get_free_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
        expandable_active: bool,
    ) -> Option<Id> {
        let p = pool_index(small);
        if self.set_fraction && self.config.garbage_collection_threshold > 0.0 {
            // Track block reuse interval only when garbage collection is enabled.
            self.count_get_free_block(p, stream);
        }
        let max_split = self.config.max_split_size;
        // Entries are (size, addr, id), all of this stream (the set keeps one
        // set per stream, so leaving the stream is running off the end).
        let pool = &self.pools[p].blocks;
        let mut c = pool.lower_bound(stream, size)?;
        let mut cur = pool.get(c);
        if self.b(cur.2).seg != NIL {
            if expandable_active {
                // Best fit by the size a block could expand to.
                let exp = |k: &(u64, u64, Id)| {
                    let b = self.b(k.2);
                    b.size
                        + if b.next != NIL && !self.b(b.next).mapped {
                            self.b(b.next).size
                        } else {
                            0
                        }
                };
                while let Some(nc) = pool.next(c) {
                    let n = pool.get(nc);
                    if !(self.b(cur.2).seg != NIL && exp(&n) < exp(&cur)) {
                        break;
                    }
                    cur = n;
                    c = nc;
                }
            } else {
                // Expandable segments turned off: only non-expandable blocks.
                loop {
                    c = pool.next(c)?;
                    cur = pool.get(c);
                    if self.b(cur.2).seg == NIL {
                        break;
                    }
                }
            }
        }
        // Do not return an oversized block for a large request.
        if size < max_split && cur.0 >= max_split {
            return None;
        }
        // Allow oversized block size to be rounded up but within a limit.
        if size >= max_split
            && cur.0 >= size.saturating_add(self.config.max_non_split_rounding_size)
        {
            return None;
        }
        self.pools[p].blocks.remove_at(c);
        self.pools[p].changes += 1;
        Some(cur.2)
    }

    /// `should_split`; `expandable_active`: `is_expandable_segments_active`.
    fn should_split(&self, id: Id, size: u64, expandable_active: bool) -> bool {
        let b = self.b(id);
        // "If the pool is marked as not splitting a segment, do not split"
        // (`no_split_pools.find(block->pool->owner_MempoolId())`)
        if self.no_split_stream(b.stream) {
            return false;
        }
        let remaining = b.size - size;
        if b.small || expandable_active {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.config.max_split_size && remaining > SMALL_SIZE
        }
    }

    /// `alloc_found_block`.
    fn alloc_found_block(
        &mut self,
        id: Id,
        size: u64,
        orig_size: u64,
        stream: u64,
        split: bool,
    ) -> Handle {
        let small = self.b(id).small;
        let already_split = self.is_split(id);
        let block = if split {
            let remaining = id;
            let (addr, seg, prev) = {
                let r = self.b(remaining);
                (r.addr, r.seg, r.prev)
            };
            let block = self.new_block(addr, size, stream, small, seg);
            self.bm(block).prev = prev;
            if prev != NIL {
                self.bm(prev).next = block;
            }
            self.bm(block).next = remaining;
            {
                let r = self.bm(remaining);
                r.prev = block;
                r.addr += size;
                r.size -= size;
            }
            self.insert_into_blocks(remaining);
            if !self.figures_only && already_split && seg == NIL {
                // An already-split inactive block is being shrunk by size bytes.
                self.stats.inactive_split_bytes.decrease(small, size);
            } else if !self.figures_only && seg == NIL {
                // A new split inactive block is being created.
                let rs = self.b(remaining).size;
                self.stats.inactive_split_bytes.increase(small, rs);
                self.stats.inactive_split.increase(small, 1);
            }
            block
        } else {
            if !self.figures_only && already_split && self.b(id).seg == NIL {
                // An already-split block is becoming active.
                let s = self.b(id).size;
                self.stats.inactive_split_bytes.decrease(small, s);
                self.stats.inactive_split.decrease(small, 1);
            }
            id
        };
        let (addr, bsize) = {
            let b = self.bm(block);
            b.allocated = true;
            b.requested_size = orig_size;
            (b.addr, b.size)
        };
        self.record(TraceAction::Alloc, addr, orig_size, stream);
        if self.index_addresses {
            let blocks = &self.blocks;
            self.allocated
                .insert(addr, block, |id| blocks[id as usize].addr);
        }
        let s = &mut self.stats;
        if !self.figures_only {
            s.allocation.increase(small, 1);
        }
        s.allocated_bytes.increase(small, bsize);
        s.requested_bytes.increase(small, orig_size);
        if let Some(p) = self.malloc_async.as_mut() {
            p.malloc(addr, orig_size);
        }
        let s = &mut self.stats;
        if s.active_apart {
            s.active.increase(small, 1);
            s.active_bytes.increase(small, bsize);
        }
        if bsize >= self.config.max_split_size {
            s.oversize_allocations.increase(1);
        }
        Handle { addr, id: block }
    }

    /// `free_block`: back into the pool, merged with free neighbours.
    fn free_block(&mut self, id: Id) {
        let (addr, requested, stream, small, orig_size, prev, next) = {
            let b = self.b(id);
            (
                b.addr,
                b.requested_size,
                b.stream,
                b.small,
                b.size,
                b.prev,
                b.next,
            )
        };
        self.record(TraceAction::FreeCompleted, addr, requested, stream);
        let mut net_blocks: i64 = 0;
        let mut net_size: i64 = 0;
        for cand in [prev, next] {
            let sub = self.try_merge_blocks(id, cand);
            if sub > 0 {
                net_blocks -= 1;
                net_size -= sub as i64;
            }
        }
        self.insert_into_blocks(id);
        // Expandable segments are left out of inactive_split (see PyTorch).
        if !self.figures_only && self.blocks[id as usize].seg == NIL {
            if self.is_split(id) {
                net_blocks += 1;
                net_size += self.b(id).size as i64;
            }
            let s = &mut self.stats;
            if net_blocks > 0 {
                s.inactive_split.increase(small, net_blocks as u64);
            } else if net_blocks < 0 {
                s.inactive_split.decrease(small, (-net_blocks) as u64);
            }
            if net_size > 0 {
                s.inactive_split_bytes.increase(small, net_size as u64);
            } else if net_size < 0 {
                s.inactive_split_bytes.decrease(small, (-net_size) as u64);
            }
        }
        let s = &mut self.stats;
        if s.active_apart {
            s.active.decrease(small, 1);
            s.active_bytes.decrease(small, orig_size);
        }
        s.requested_bytes.decrease(small, requested);
        if let Some(p) = self.malloc_async.as_mut() {
            p.free(addr);
        }
    }

    /// `try_merge_blocks(dst, src)`: the size subsumed, or 0.
    ///
    /// The checks are inlined into `free_block` and the merge is not: most
    /// neighbours of a freed block are absent or allocated, and a call per
    /// neighbour cost more than the checks.
    #[inline(always)]
    fn try_merge_blocks(&mut self, dst: Id, src: Id) -> u64 {
        if src == NIL {
            return 0;
        }
        let s = self.b(src);
        if s.allocated || s.event_count > 0 || s.has_stream_uses || s.mapped != self.b(dst).mapped {
            return 0;
        }
        self.merge_blocks(dst, src)
    }

    /// The merge of `try_merge_blocks`, once `src` may merge into `dst`.
    #[inline(never)]
    fn merge_blocks(&mut self, dst: Id, src: Id) -> u64 {
        // Out of its set while its key is still intact.
        if self.b(src).mapped {
            self.remove_from_blocks(src);
        } else {
            let p = pool_index(self.b(src).small);
            let k = self.ukey(src);
            self.pools[p].unmapped.remove(&k);
        }
        let (s_addr, s_prev, s_next, s_size) = {
            let s = self.b(src);
            (s.addr, s.prev, s.next, s.size)
        };
        if self.b(dst).prev == src {
            // [src dst]
            self.bm(dst).addr = s_addr;
            self.bm(dst).prev = s_prev;
            if s_prev != NIL {
                self.bm(s_prev).next = dst;
            }
        } else {
            // [dst src]
            self.bm(dst).next = s_next;
            if s_next != NIL {
                self.bm(s_next).prev = dst;
            }
        }
        self.bm(dst).size += s_size;
        self.delete_block(src);
        s_size
    }

    /// `alloc_block`: a new segment (or mapped pages) for this request.
    fn alloc_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Option<Id> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if self.set_fraction
            && self.total_allocated_memory + alloc_size > self.allowed_memory_maximum
        {
            return None;
        }
        if self.config.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        let addr = self.device.malloc(alloc_size)?;
        self.total_allocated_memory += alloc_size;
        let id = self.new_block(addr, alloc_size, stream, small, NIL);
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, alloc_size);
        if alloc_size >= self.config.max_split_size {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentAlloc, addr, alloc_size, stream);
        Some(id)
    }

    /// `release_available_cached_blocks`: free oversize blocks, only enough.
    fn release_available_cached_blocks(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<bool, ()> {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return Ok(false);
        }
        let p = pool_index(small);
        let key_size = size.max(max_split);
        let first = self.pools[p].blocks.first_from(stream, key_size);
        match first {
            Some(k) if self.b(k.2).seg == NIL => {
                self.release_oversize_block(k.2)?;
                Ok(true)
            }
            _ => {
                // No single block is large enough; free oversize blocks,
                // starting with the largest.
                let before = self.pools[p].blocks.before(stream, key_size);
                let mut total = 0u64;
                for k in before {
                    if !(total < key_size && k.0 >= max_split) {
                        break;
                    }
                    if self.b(k.2).seg == NIL {
                        self.release_oversize_block(k.2)?;
                        total += k.0;
                    }
                }
                Ok(total >= key_size)
            }
        }
    }

    /// `release_block` of `release_available_cached_blocks`, which (unlike
    /// `release_blocks`) does not ask whether the block is a whole segment:
    /// PyTorch takes a block at least `max_split_size` long to be one, as
    /// blocks that long are never split, but one split before
    /// `max_split_size_mb` was set at run time (`_set_allocator_settings`)
    /// is not. A block inside a segment (one before it) is a pointer that
    /// `cudaFree` refuses with `cudaErrorInvalidValue`, after
    /// `num_device_free` and the trace's SEGMENT_FREE and before anything
    /// else changes (`C10_CUDA_CHECK` throws): `Err`, the block still cached.
    /// blind310/ky03 on the H100: "CUDA error: invalid argument" where the
    /// twin freed a 121,137,152-byte block inside a 463,470,592-byte segment.
    fn release_oversize_block(&mut self, id: Id) -> Result<(), ()> {
        if self.b(id).prev == NIL {
            self.release_block(id);
            return Ok(());
        }
        let (addr, size, stream) = {
            let b = self.b(id);
            (b.addr, b.size, b.stream)
        };
        self.stats.num_device_free += 1;
        self.record(TraceAction::SegmentFree, addr, size, stream);
        Err(())
    }

    /// The CUDA error `malloc` raises with the allocator's figures (no
    /// out-of-memory counted: `torch.AcceleratorError`).
    #[cold]
    fn cuda_error(&mut self, error: &'static str, size: u64) -> OutOfMemory {
        let (device_free, device_total) = self.device.mem_info();
        OutOfMemory {
            cuda_error: Some(error),
            ..self.failure(size, device_free, device_total)
        }
    }

    /// The figures a failed `malloc` of `size` reports (PyTorch's out-of-memory message).
    fn failure(&self, size: u64, device_free: u64, device_total: u64) -> OutOfMemory {
        OutOfMemory {
            alloc_size: get_allocation_size(size, self.config.large_segment_size),
            device_total,
            device_free,
            allowed: self.allowed_memory_maximum(),
            allocated_bytes: self.stats.allocated_bytes.all().current as u64,
            reserved_bytes: self.stats.reserved_bytes.all().current as u64,
            malloc_async: None,
            cuda_error: None,
        }
    }

    /// `release_cached_blocks`: sync, then free every unsplit cached block.
    fn release_cached_blocks(&mut self) {
        self.synchronize_and_free_events();
        self.release_blocks(false);
        self.release_blocks(true);
    }

    /// `release_blocks`.
    fn release_blocks(&mut self, small: bool) {
        self.release_blocks_of(small, None);
    }

    /// `release_blocks` over the cached blocks of the streams in `only` (a private pool's), or
    /// over every stream's but the kept ones' where `only` is `None`.
    fn release_blocks_of(&mut self, small: bool, only: Option<&[u64]>) {
        let p = pool_index(small);
        let ids: Vec<Id> = self.pools[p].blocks.ids();
        let mut to_unmap = Vec::new();
        for id in ids {
            let stream = self.b(id).stream;
            let skip = match only {
                Some(streams) => !streams.contains(&stream),
                None => self.kept_streams.contains(&stream),
            };
            if skip {
                continue;
            }
            if self.b(id).seg != NIL {
                to_unmap.push(id);
            } else if !self.is_split(id) {
                self.release_block(id);
            }
        }
        for id in to_unmap {
            self.unmap_block(id);
            if !self.is_split(id) {
                self.release_expandable_segment(id);
            }
        }
    }

    /// `release_block`: `cudaFree` a whole segment.
    fn release_block(&mut self, id: Id) {
        let (addr, size, stream, small) = {
            let b = self.b(id);
            debug_assert!(b.seg == NIL);
            (b.addr, b.size, b.stream, b.small)
        };
        self.stats.num_device_free += 1;
        self.record(TraceAction::SegmentFree, addr, size, stream);
        // `cudaFree`: a split segment's first block (`release_available_cached_blocks`) gives back
        // its whole allocation on the device (`SimDevice::free`), the counters below the block's size
        self.device.free(addr, size);
        self.total_allocated_memory -= size;
        self.stats.segment.decrease(small, 1);
        self.stats.reserved_bytes.decrease(small, size);
        if size >= self.config.max_split_size {
            // a segment cudaMalloc'd before `max_split_size_mb` was lowered at run time was never
            // counted oversize: the wheel's counter goes below zero here
            self.stats.oversize_segments.decrease_unchecked(1);
        }
        self.remove_from_blocks(id);
        self.delete_block(id);
    }

    /// `garbage_collect_cached_blocks`: free old unsplit large blocks until
    /// usage falls under the threshold of the allowed memory.
    fn garbage_collect_cached_blocks(&mut self) {
        let gc_threshold =
            (self.config.garbage_collection_threshold * self.allowed_memory_maximum as f64) as u64;
        if self.total_allocated_memory <= gc_threshold {
            return;
        }
        let target = self.total_allocated_memory - gc_threshold;
        let mut reclaimed = 0u64;
        let mut total_age = 0u64;
        let mut count = 0i64;
        // `large_blocks` alone: a private pool's blocks (a CUDA graph's, a MemPool's) are in its
        // own BlockPool, which the collection never visits (blind310/ky02 on the H100: a capture
        // over the threshold kept its 8.47 GiB pool, where the twin freed 3.7 GB of it)
        let ids: Vec<Id> = self.global_large_block_ids();
        for &id in &ids {
            if !self.is_split(id) {
                total_age += self.gc_count(id);
                count += 1;
            }
        }
        if count == 0 {
            return;
        }
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed = false;
            let ids: Vec<Id> = self.global_large_block_ids();
            for id in ids {
                if !self.is_split(id)
                    && self.b(id).seg == NIL
                    && self.gc_count(id) as f64 >= age_threshold
                {
                    freed = true;
                    reclaimed += self.b(id).size;
                    total_age -= self.gc_count(id);
                    count -= 1;
                    self.release_block(id);
                }
            }
        }
    }

    /// `++pool.get_free_blocks_call_count` of `get_free_block`: the count of
    /// the BlockPool searched, which for a private pool's stream is the
    /// private pool's own, read by no collection (the global pools' ages
    /// stay as they were).
    fn count_get_free_block(&mut self, p: usize, stream: u64) {
        if !self.private_pools.contains_key(&stream) {
            self.pools[p].get_free_blocks_call_count += 1;
        }
    }

    /// The cached blocks of `large_blocks`, the large pool outside every
    /// private pool (the twin keys a private pool's blocks by streams of
    /// their own in the same set).
    fn global_large_block_ids(&self) -> Vec<Id> {
        let mut ids = self.pools[1].blocks.ids();
        if !self.private_pools.is_empty() {
            ids.retain(|&id| !self.private_pools.contains_key(&self.b(id).stream));
        }
        ids
    }

    // ---- expandable segments ---------------------------------------------------

    fn allocatable(&self, id: Id) -> bool {
        id != NIL && {
            let b = self.b(id);
            !b.allocated && b.event_count == 0 && !b.has_stream_uses
        }
    }

    /// `find_expandable_block`: the lowest address with room for `size`;
    /// `None` when a new segment's address range cannot be reserved.
    fn find_expandable_block(&mut self, small: bool, stream: u64, size: u64) -> Option<Id> {
        let p = pool_index(small);
        let cands: Vec<Id> = self.pools[p]
            .unmapped
            .range((stream, 0, 0)..)
            .take_while(|k| k.0 == stream)
            .map(|k| k.2)
            .collect();
        for c in cands {
            let mut c = c;
            let prev = self.b(c).prev;
            if self.allocatable(prev) {
                c = prev;
            }
            let mut bytes = 0;
            let mut b = c;
            while bytes < size && self.allocatable(b) {
                bytes += self.b(b).size;
                b = self.b(b).next;
            }
            if bytes >= size {
                return Some(c);
            }
        }
        // 2 MiB pages for the small pool, 20 MiB for the large; address space
        // for 1 1/8 of the GPU's memory.
        let segment_size = if small {
            SMALL_BUFFER
        } else {
            self.config.large_segment_size
        };
        let (_, total) = self.device.mem_info();
        let address_space = total.checked_add(total / 8)?;
        let max_handles = address_space.div_ceil(segment_size);
        let reserved = segment_size.checked_mul(max_handles)?;
        let base = self.device.reserve(reserved)?;
        base.checked_add(reserved)?;
        let seg = ExpandableSegment {
            base,
            segment_size,
            max_handles,
            handles: Vec::new(),
        };
        let seg_size = seg.size();
        let sid = self.segments.len() as Id;
        self.segments.push(Some(seg));
        self.live_segments.push(sid);
        let cand = self.new_block(base, seg_size, stream, small, sid);
        self.bm(cand).mapped = false;
        let k = self.ukey(cand);
        self.pools[p].unmapped.insert(k);
        Some(cand)
    }

    /// `try_allocate_expandable_block`.
    fn try_allocate_expandable_block(&mut self, small: bool, stream: u64, size: u64) -> Option<Id> {
        let mut cand = self.find_expandable_block(small, stream, size)?;
        if !self.b(cand).mapped {
            let s = self.b(cand).size.min(size);
            if !self.map_block(cand, s) {
                return None;
            }
        }
        while self.b(cand).size < size {
            let remaining = size - self.b(cand).size;
            let new_cand = self.b(cand).next;
            let s = remaining.min(self.b(new_cand).size);
            if !self.map_block(new_cand, s) {
                return None;
            }
            cand = new_cand;
        }
        self.remove_from_blocks(cand);
        Some(cand)
    }

    /// `map_block`.
    fn map_block(&mut self, id: Id, size: u64) -> bool {
        let (addr, bsize, stream, small, sid) = {
            let b = self.b(id);
            (b.addr, b.size, b.stream, b.small, b.seg)
        };
        let seg = self.segments[sid as usize].as_mut().expect("live segment");
        let (mptr, msize) = seg.map(addr, size, &mut self.device);
        if msize == 0 {
            return false;
        }
        let p = pool_index(small);
        let k = self.ukey(id);
        self.pools[p].unmapped.remove(&k);
        self.bm(id).mapped = true;
        if msize < bsize {
            let rem = self.new_block(addr + msize, bsize - msize, stream, small, sid);
            self.bm(rem).mapped = false;
            let next = self.b(id).next;
            self.splice(rem, id, next);
            let k = self.ukey(rem);
            self.pools[p].unmapped.insert(k);
            self.bm(id).size = msize;
        }
        let prev = self.b(id).prev;
        self.try_merge_blocks(id, prev);
        let next = self.b(id).next;
        self.try_merge_blocks(id, next);
        self.insert_into_blocks(id);
        self.total_allocated_memory += msize;
        self.stats.reserved_bytes.increase(small, msize);
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentMap, mptr, msize, stream);
        true
    }

    /// `unmap_block`: give the whole free pages of a free block back.
    fn unmap_block(&mut self, id: Id) {
        let (addr, size, stream, small, sid) = {
            let b = self.b(id);
            (b.addr, b.size, b.stream, b.small, b.seg)
        };
        let seg = self.segments[sid as usize].as_mut().expect("live segment");
        let (uptr, usize_) = seg.unmap(addr, size, &mut self.device);
        if usize_ == 0 {
            return;
        }
        self.remove_from_blocks(id);
        let before = uptr - addr;
        if before > 0 {
            let bf = self.new_block(addr, before, stream, small, sid);
            let prev = self.b(id).prev;
            self.splice(bf, prev, id);
            self.insert_into_blocks(bf);
        }
        let after = size - (before + usize_);
        if after > 0 {
            let af = self.new_block(uptr + usize_, after, stream, small, sid);
            let next = self.b(id).next;
            self.splice(af, id, next);
            self.insert_into_blocks(af);
        }
        {
            let b = self.bm(id);
            b.addr = uptr;
            b.size = usize_;
            b.mapped = false;
        }
        let prev = self.b(id).prev;
        self.try_merge_blocks(id, prev);
        let next = self.b(id).next;
        self.try_merge_blocks(id, next);
        let p = pool_index(small);
        let k = self.ukey(id);
        self.pools[p].unmapped.insert(k);
        self.total_allocated_memory -= usize_;
        self.stats.reserved_bytes.decrease(small, usize_);
        self.stats.num_device_free += 1;
        self.record(TraceAction::SegmentUnmap, uptr, usize_, stream);
    }

    /// `release_expandable_segment`: the whole segment is unmapped; drop it.
    fn release_expandable_segment(&mut self, id: Id) {
        let sid = self.b(id).seg;
        debug_assert!(!self.b(id).mapped);
        self.live_segments.retain(|&s| s != sid);
        self.segments[sid as usize] = None;
        let p = pool_index(self.b(id).small);
        let k = self.ukey(id);
        self.pools[p].unmapped.remove(&k);
        self.delete_block(id);
    }

    /// Check every structural invariant; `Err` names the first one broken.
    /// (Used by the property tests after every operation.)
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0u64;
        let mut reserved = 0u64;
        let mut free_mapped = 0usize;
        // blocks allocated or with a free waiting on another stream's use
        let (mut active, mut active_bytes) = (0i64, 0u64);
        for (i, b) in self.blocks.iter().enumerate() {
            let id = i as Id;
            if self.free_ids.contains(&id) {
                continue;
            }
            if b.next != NIL {
                let n = self.b(b.next);
                if n.prev != id {
                    return Err(format!("block {id}: next.prev is not itself"));
                }
                if b.addr + b.size != n.addr {
                    return Err(format!(
                        "block {id} at {:#x}+{} does not end where its next begins ({:#x})",
                        b.addr, b.size, n.addr
                    ));
                }
            }
            if b.prev != NIL && self.b(b.prev).next != id {
                return Err(format!("block {id}: prev.next is not itself"));
            }
            if b.mapped {
                reserved += b.size;
            }
            if b.allocated || b.event_count > 0 {
                active += 1;
                active_bytes += b.size;
            }
            if b.allocated {
                allocated += b.size;
                if self.index_addresses
                    && self.allocated.get(b.addr, |i| self.b(i).addr) != Some(id)
                {
                    return Err(format!("allocated block {id} is not in allocated_blocks"));
                }
            }
            let in_pool = self.pools[pool_index(b.small)]
                .blocks
                .contains(b.stream, b.size, b.addr);
            let should = b.mapped && !b.allocated && b.event_count == 0;
            if in_pool != should {
                return Err(format!("block {id}: in pool {in_pool}, expected {should}"));
            }
            if in_pool {
                free_mapped += 1;
                // Two free neighbours would have been merged.
                if b.next != NIL
                    && self.b(b.next).mapped
                    && !self.b(b.next).allocated
                    && self.b(b.next).event_count == 0
                {
                    return Err(format!("free block {id} has a free next block"));
                }
            }
        }
        let pooled: usize = self.pools.iter().map(|p| p.blocks.len()).sum();
        if pooled != free_mapped {
            return Err(format!(
                "pools hold {pooled} blocks, {free_mapped} are free"
            ));
        }
        let s = &self.stats;
        if s.allocated_bytes.all().current as u64 != allocated {
            return Err(format!(
                "allocated_bytes {} != sum of allocated blocks {allocated}",
                s.allocated_bytes.all().current
            ));
        }
        if s.reserved_bytes.all().current as u64 != reserved
            || self.total_allocated_memory != reserved
        {
            return Err(format!(
                "reserved_bytes {} != sum of segments {reserved}",
                s.reserved_bytes.all().current
            ));
        }
        let (a, ab) = (s.active().all().current, s.active_bytes().all().current);
        // (read off the allocation stats until kept apart: not kept by an
        // allocator of figures only)
        let kept = !self.figures_only || s.active_apart;
        if kept && (a, ab as u64) != (active, active_bytes) {
            return Err(format!(
                "active stats ({a} blocks, {ab} bytes) != active blocks ({active}, {active_bytes} bytes)"
            ));
        }
        for (name, v) in s.memory_stats() {
            if v < 0 && name != "max_split_size" {
                return Err(format!("{name} is negative: {v}"));
            }
        }
        Ok(())
    }
}

/// `get_allocation_size`: the segment size `cudaMalloc`ed for a rounded
/// request; `large_segment_size` is `large_segment_size_mb` (default 20 MiB,
/// `kLargeBuffer`).
pub fn get_allocation_size(size: u64, large_segment_size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        large_segment_size
    } else {
        ROUND_LARGE * size.div_ceil(ROUND_LARGE)
    }
}

/// `roundup_power2_next_division`: round up to the next of `divisions` equal
/// steps between two powers of two.
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_freed_with_stream_uses_during_a_capture_waits_for_the_capture_to_end() {
        // CUDACachingAllocator.cpp: `free` defers such a block
        // (`needs_events_deferred_until_no_capture`), `malloc` skips
        // `process_events` while a capture is underway
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let used = a.malloc(4 << 20, 0).unwrap();
        a.record_stream(used, 5).unwrap();
        a.begin_allocate_to_pool();
        a.free(used).unwrap();
        let during = a.malloc(4 << 20, 7).unwrap();
        let requested = |a: &CachingAllocator<SimDevice>| a.stats().requested_bytes.all().current;
        assert_eq!(requested(&a), 8 << 20);
        assert_eq!(a.stats().allocated_bytes.all().current, 4 << 20);
        a.end_allocate_to_pool();
        assert_eq!(requested(&a), 8 << 20);
        // the first malloc after the capture inserts its events; they have completed
        let after = a.malloc(512, 0).unwrap();
        assert_eq!(requested(&a), (4 << 20) + 512);
        a.free(during).unwrap();
        a.free(after).unwrap();
        // a stream recorded during the capture needs no event: freed at once after it
        a.begin_allocate_to_pool();
        let captured = a.malloc(4 << 20, 7).unwrap();
        a.record_stream(captured, 5).unwrap();
        a.free(captured).unwrap();
        a.end_allocate_to_pool();
        assert_eq!(requested(&a), 4 << 20);
        a.empty_cache();
        assert_eq!(requested(&a), 0);
    }

    /// A pool's private stream, as the Python side keys MemPool `(0, pool)`'s
    /// blocks on stream 0.
    fn private(pool: u64) -> u64 {
        0x7E00_0000_0000 + (pool << 24)
    }

    #[test]
    fn a_no_split_pool_hands_out_whole_blocks() {
        // `should_split`: "If the pool is marked as not splitting a segment, do not split"
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let p = private(1);
        a.register_private_stream(p, 1, 0);
        a.set_no_split(1);
        let allocated = |a: &CachingAllocator<SimDevice>| a.stats().allocated_bytes.all().current;
        let x = a.malloc(4096, p).unwrap();
        assert_eq!(allocated(&a), 2 << 20, "the small segment whole");
        let y = a.malloc(4096, p).unwrap();
        assert_eq!(a.stats().segment.all().current, 2);
        a.free(x).unwrap();
        // a later request takes the whole cached block again
        let z = a.malloc(8192, p).unwrap();
        assert_eq!(z, x);
        assert_eq!(allocated(&a), 4 << 20);
        // 1 to 10 MiB: the 20 MiB segment whole
        let big = a.malloc(5 << 20, p).unwrap();
        assert_eq!(allocated(&a), 24 << 20);
        for h in [y, z, big] {
            a.free(h).unwrap();
        }
        // another pool, and the default pool, still split
        let q = private(2);
        a.register_private_stream(q, 2, 0);
        a.malloc(4096, q).unwrap();
        a.malloc(4096, 0).unwrap();
        assert_eq!(allocated(&a), 8192);
    }

    /// 100 MiB to allocate; pool 1 (`use_on_oom` where `on`) holds a free
    /// 40 MiB block of stream 0, the default pool 50 MiB in use.
    fn over_a_pool(cfg: &str, on: bool) -> CachingAllocator<SimDevice> {
        let cfg = AllocatorConfig::parse(cfg).unwrap();
        let mut a = CachingAllocator::with_device(cfg, SimDevice::new(1 << 40, 100 << 20));
        let p = private(1);
        a.register_private_stream(p, 1, 0);
        a.keep_through_empty_cache(p, true);
        a.set_use_on_oom(1, on);
        let x = a.malloc(40 << 20, p).unwrap();
        a.free(x).unwrap();
        a.malloc(50 << 20, 0).unwrap();
        a
    }

    #[test]
    fn a_use_on_oom_pool_serves_a_request_cuda_malloc_cannot() {
        // `try_mempool_fallback`: the pool's free block, split as any
        let mut a = over_a_pool("", true);
        let h = a.malloc(30 << 20, 0).unwrap();
        assert_eq!(a.stats().allocated_bytes.all().current, 80 << 20);
        assert_eq!(a.stats().reserved_bytes.all().current, 90 << 20);
        // freed, it goes back to the pool: a default request that cannot fit fails
        a.free(h).unwrap();
        a.set_use_on_oom(1, false);
        assert!(a.malloc(30 << 20, 0).is_err());
        // without the option: out of memory (the pool's cached block is kept)
        let mut a = over_a_pool("", false);
        assert!(a.malloc(30 << 20, 0).is_err());
        // a request that goes to a private pool itself does not fall back
        let mut a = over_a_pool("", true);
        let q = private(2);
        a.register_private_stream(q, 2, 0);
        assert!(a.malloc(30 << 20, q).is_err());
    }

    #[test]
    fn the_fallback_comes_before_freeing_cached_oversize_blocks() {
        // malloc: alloc_block || try_mempool_fallback || release_available_cached_blocks ...
        let cfg = AllocatorConfig::parse("max_split_size_mb:20").unwrap();
        let mut a = CachingAllocator::with_device(cfg, SimDevice::new(1 << 40, 100 << 20));
        let p = private(1);
        a.register_private_stream(p, 1, 0);
        a.keep_through_empty_cache(p, true);
        a.set_use_on_oom(1, true);
        let x = a.malloc(40 << 20, p).unwrap();
        a.free(x).unwrap();
        // a cached oversize block of the default pool that does not fit 30 MiB
        let o = a.malloc(24 << 20, 0).unwrap();
        a.malloc(26 << 20, 0).unwrap();
        a.free(o).unwrap();
        let frees = a.stats().num_device_free;
        a.malloc(30 << 20, 0).unwrap();
        assert_eq!(a.stats().num_device_free, frees, "no segment released");
        // oversize: the pool's 40 MiB block whole
        assert_eq!(a.stats().allocated_bytes.all().current, 66 << 20);
        assert_eq!(a.stats().reserved_bytes.all().current, 90 << 20);
    }

    #[test]
    fn use_on_oom_pools_are_tried_in_their_hash_sets_order() {
        // `use_on_oom_pools` iterates pool 2 before pool 1 (`SkaSet`)
        let mut a = CachingAllocator::with_device(
            AllocatorConfig::default(),
            SimDevice::new(1 << 40, 100 << 20),
        );
        let mut blocks = Vec::new();
        for pool in [1, 2] {
            let p = private(pool);
            a.register_private_stream(p, pool, 0);
            a.keep_through_empty_cache(p, true);
            a.set_use_on_oom(pool, true);
            // a free 20 MiB segment in each
            let y = a.malloc(5 << 20, p).unwrap();
            a.free(y).unwrap();
            blocks.push(y);
        }
        a.malloc(60 << 20, 0).unwrap();
        let h = a.malloc(5 << 20, 0).unwrap();
        assert_eq!(h, blocks[1], "pool 2 first");
    }

    /// A capture on stream 0 into pool 1 with `graph_capture_record_stream_reuse`
    /// as `reuse`, a side stream 5 joined into it; `x` used on 5 and freed.
    fn captured_and_freed(reuse: bool) -> (CachingAllocator<SimDevice>, Addr) {
        let cfg = if reuse {
            "graph_capture_record_stream_reuse:True"
        } else {
            ""
        };
        let mut a = CachingAllocator::new(AllocatorConfig::parse(cfg).unwrap());
        let p = private(1);
        a.register_private_stream(p, 1, 0);
        a.begin_allocate_to_pool();
        a.capture_stream_begin(0);
        a.capture_stream_op(0);
        // the side stream joins: it waits on an event recorded on 0
        a.capture_event_record(1, 0);
        a.capture_event_wait(5, 1);
        let x = a.malloc(4 << 20, p).unwrap();
        a.capture_stream_op(0);
        a.record_stream(x, 5).unwrap();
        a.capture_stream_op(5);
        a.free(x).unwrap();
        (a, x)
    }

    #[test]
    fn a_block_freed_in_a_capture_is_reused_once_its_stream_follows_its_free_markers() {
        // `record_free_markers` at the free, `free_safe_blocks_in_capture` at each malloc
        let (mut a, x) = captured_and_freed(true);
        let p = private(1);
        // stream 0 has not waited on the side stream: x is not safe yet
        let y = a.malloc(4 << 20, p).unwrap();
        assert_ne!(y, x);
        // the side stream's work joined back into stream 0
        a.capture_event_record(2, 5);
        a.capture_event_wait(0, 2);
        let z = a.malloc(4 << 20, p).unwrap();
        assert_eq!(z, x, "reused within the capture");
        // without the setting: only after the capture's end
        let (mut a, x) = captured_and_freed(false);
        a.capture_event_record(2, 5);
        a.capture_event_wait(0, 2);
        a.malloc(4 << 20, p).unwrap();
        let z = a.malloc(4 << 20, p).unwrap();
        assert_ne!(z, x);
    }

    #[test]
    fn a_block_used_on_a_stream_outside_the_capture_waits_for_its_end() {
        // `record_free_markers`: a stream not capturing gives no marker
        let (mut a, _) = captured_and_freed(true);
        let p = private(1);
        let w = a.malloc(4 << 20, p).unwrap();
        a.capture_stream_op(0);
        a.record_stream(w, 9).unwrap();
        a.free(w).unwrap();
        a.capture_event_record(2, 5);
        a.capture_event_wait(0, 2);
        a.capture_event_record(3, 9);
        a.capture_event_wait(0, 3);
        let v = a.malloc(4 << 20, p).unwrap();
        let u = a.malloc(4 << 20, p).unwrap();
        assert_ne!(v, w);
        assert_ne!(u, w);
        a.capture_stream_end(0);
        a.end_allocate_to_pool();
        assert!(!a.capture_clocks.contains_key(&5));
    }

    #[test]
    fn an_out_of_memory_during_a_capture_frees_no_cached_block() {
        // `C10_LIKELY(captures_underway.empty()) && release_cached_blocks(..)`
        let mut a = CachingAllocator::with_device(
            AllocatorConfig::default(),
            SimDevice::new(1 << 40, 100 << 20),
        );
        let x = a.malloc(60 << 20, 0).unwrap();
        a.free(x).unwrap();
        a.begin_allocate_to_pool();
        assert!(a.malloc(70 << 20, 0).is_err());
        assert_eq!(a.stats().reserved_bytes.all().current, 60 << 20);
        a.end_allocate_to_pool();
        a.malloc(70 << 20, 0).unwrap();
    }

    #[test]
    fn a_kept_streams_cached_blocks_survive_empty_cache_until_released() {
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let kept = a.malloc(4 << 20, 7).unwrap();
        let other = a.malloc(4 << 20, 0).unwrap();
        a.free(kept).unwrap();
        a.free(other).unwrap();
        a.keep_through_empty_cache(7, true);
        a.empty_cache();
        // the kept stream's 20 MiB segment (kLargeBuffer) stays, the other goes
        assert_eq!(a.stats().reserved_bytes.all().current, 20 << 20);
        a.keep_through_empty_cache(7, false);
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.all().current, 0);
    }

    #[test]
    fn a_released_pools_empty_cache_frees_its_blocks_alone() {
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let pooled = a.malloc(4 << 20, 7).unwrap();
        let small = a.malloc(512, 7).unwrap();
        let other = a.malloc(4 << 20, 0).unwrap();
        a.free(pooled).unwrap();
        a.free(small).unwrap();
        a.free(other).unwrap();
        a.keep_through_empty_cache(7, true);
        a.empty_cache_of(&[7]);
        // the pool's 20 MiB and 2 MiB segments go, the default stream's cached 20 MiB stays
        assert_eq!(a.stats().reserved_bytes.all().current, 20 << 20);
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.all().current, 0);
    }

    #[test]
    fn settings_changed_at_run_time_shape_only_new_segments() {
        const MB: u64 = 1 << 20;
        let reserved = |a: &CachingAllocator| a.stats().reserved_bytes.all().current as u64;
        let mut a = CachingAllocator::new(AllocatorConfig::default());
        let p = a.malloc(30 * MB, 0).unwrap();
        a.free(p).unwrap();
        a.set_allocator_settings("expandable_segments:True")
            .unwrap();
        // the ordinary segment cached before the switch is taken as it is
        let p = a.malloc(30 * MB, 0).unwrap();
        assert_eq!(reserved(&a), 30 * MB);
        // a new segment is expandable: pages of 20 MiB (kLargeBuffer)
        let q = a.malloc(50 * MB, 0).unwrap();
        assert_eq!(reserved(&a), 90 * MB);
        let expandable: Vec<bool> = a.snapshot().iter().map(|s| s.is_expandable).collect();
        assert_eq!(
            expandable.iter().filter(|&&e| e).count(),
            1,
            "{expandable:?}"
        );
        a.free(p).unwrap();
        a.free(q).unwrap();
        // switched off: the free expandable block takes no new request
        a.set_allocator_settings("expandable_segments:False")
            .unwrap();
        assert!(a.large_pool(0).is_none(), "an expandable segment is live");
        let r = a.malloc(50 * MB, 0).unwrap();
        assert_eq!(reserved(&a), 140 * MB);
        a.free(r).unwrap();
        // a bad string leaves what came before it applied
        assert!(a
            .set_allocator_settings("max_split_size_mb:40,foo:1")
            .is_err());
        assert_eq!(a.config().max_split_size, 40 * MB);
    }

    /// An 80 GiB device (an H100's order) whose allocator may take 1 GiB of it
    /// (`set_memory_fraction(1/80)`): an allocation past that is released for room or fails.
    fn one_gib_of_an_h100(cfg: AllocatorConfig) -> CachingAllocator<SimDevice> {
        const GB: u64 = 1 << 30;
        let mut a = CachingAllocator::with_device(cfg, SimDevice::new(80 * GB, 80 * GB));
        a.set_memory_fraction(1.0 / 80.0);
        a
    }

    #[test]
    fn a_block_split_before_max_split_was_set_fails_cuda_free_when_released_for_room() {
        // blind310/ky03 on the H100: `release_available_cached_blocks` frees cached blocks at
        // least `max_split_size` long without asking whether they are whole segments; one split
        // before `max_split_size_mb` was set at run time lies inside its segment, and `cudaFree`
        // of that pointer fails ("CUDA error: invalid argument", `torch.AcceleratorError`)
        const MB: u64 = 1 << 20;
        let mut a = one_gib_of_an_h100(AllocatorConfig::default());
        let whole = a.malloc(300 * MB, 0).unwrap();
        a.free(whole).unwrap();
        // no max_split yet: the 300 MiB segment is split, its free 200 MiB tail inside it
        let head = a.malloc(100 * MB, 0).unwrap();
        a.set_allocator_settings("max_split_size_mb:150").unwrap();
        let frees = a.stats().num_device_free;
        let e = a.malloc(800 * MB, 0).unwrap_err();
        assert_eq!(e.cuda_error, Some("invalid argument"));
        assert_eq!(e.to_string(), "CUDA error: invalid argument");
        assert!(e
            .torch_message()
            .starts_with("CUDA error: invalid argument\nSearch for `cudaErrorInvalidValue' in "));
        // counted and traced before the failing cudaFree, nothing else changed
        assert_eq!(a.stats().num_device_free, frees + 1);
        assert_eq!(a.stats().num_ooms, 0);
        assert_eq!(a.stats().reserved_bytes.all().current as u64, 300 * MB);
        a.free(head).unwrap();
    }

    #[test]
    fn a_split_segments_first_block_released_for_room_frees_the_whole_allocation() {
        // the first-block case of blind310/ky03's path: `cudaFree` of a split segment's first
        // block succeeds and frees the whole cudaMalloc allocation (the device's used memory drops
        // by the segment), while `release_block` takes only the block's size off reserved
        const MB: u64 = 1 << 20;
        let mut a = one_gib_of_an_h100(AllocatorConfig::default());
        let whole = a.malloc(300 * MB, 0).unwrap();
        a.free(whole).unwrap();
        let first = a.malloc(200 * MB, 0).unwrap();
        let tail = a.malloc(100 * MB, 0).unwrap();
        a.free(first).unwrap();
        a.set_allocator_settings("max_split_size_mb:150").unwrap();
        let (free0, _) = a.mem_info();
        let frees = a.stats().num_device_free;
        let big = a.malloc(800 * MB, 0).unwrap();
        assert_eq!(a.stats().num_device_free, frees + 1);
        // reserved: 300 - 200 + 800 MiB; the device: 300 MiB freed, 800 MiB taken
        assert_eq!(a.stats().reserved_bytes.all().current as u64, 900 * MB);
        assert_eq!(a.stats().allocated_bytes.all().current as u64, 900 * MB);
        assert_eq!(a.mem_info().0, free0 + 300 * MB - 800 * MB);
        // the 300 MiB segment, made before max_split_size, was never counted oversize: -1 for it,
        // +1 for the 800 MiB one
        assert_eq!(a.stats().oversize_segments.current, 0);
        // (the tail's `prev` names a deleted block: what freeing it does is undefined in PyTorch)
        let _ = (big, tail);
    }

    #[test]
    fn garbage_collection_frees_the_global_large_pool_alone() {
        // `garbage_collect_cached_blocks` walks `large_blocks`; a CUDA graph's private pool is a
        // BlockPool of its own (blind310/ky02 on the H100: a capture past the threshold kept its
        // pool), and its searches count in its own `get_free_blocks_call_count`
        const MB: u64 = 1 << 20;
        let cfg = AllocatorConfig::parse("garbage_collection_threshold:0.5").unwrap();
        let mut a = one_gib_of_an_h100(cfg);
        let private = (1u64 << 40) + 7;
        a.register_private_stream(private, 1, 0);
        a.keep_through_empty_cache(private, true);
        let g = a.malloc(600 * MB, private).unwrap();
        a.free(g).unwrap();
        let calls = a.pools[1].get_free_blocks_call_count;
        // 600 MiB reserved is past half the 1 GiB limit: nothing global to collect
        let x = a.malloc(300 * MB, 0).unwrap();
        assert_eq!(a.stats().reserved_bytes.all().current as u64, 900 * MB);
        assert_eq!(a.pools[1].get_free_blocks_call_count, calls + 1);
        let y = a.malloc(100 * MB, private).unwrap();
        assert_eq!(a.pools[1].get_free_blocks_call_count, calls + 1);
        a.free(x).unwrap();
        a.free(y).unwrap();
    }

    #[test]
    fn the_settings_fraction_limits_the_allocator_from_its_start_only() {
        const GB: u64 = 1 << 30;
        let device = || SimDevice::new(80 * GB, 80 * GB);
        let cfg = AllocatorConfig::parse("per_process_memory_fraction:0.25").unwrap();
        let mut a = CachingAllocator::with_device(cfg, device());
        assert_eq!(a.allowed_memory_maximum(), Some(20 * GB));
        assert_eq!(a.memory_fraction(), 0.25);
        assert!(a.malloc(21 * GB, 0).is_err());
        // given after the start, the setting changes nothing else
        a.set_allocator_settings("per_process_memory_fraction:0.5")
            .unwrap();
        assert_eq!(a.config().per_process_memory_fraction, 0.5);
        assert_eq!(a.allowed_memory_maximum(), Some(20 * GB));
        // PyTorch 2.11's setMemoryFraction: 1.0 is no limit at all
        a.set_memory_fraction(1.0);
        assert_eq!(a.allowed_memory_maximum(), None);
        assert_eq!(a.memory_fraction(), 1.0);
        let unlimited = CachingAllocator::with_device(AllocatorConfig::default(), device());
        assert_eq!(unlimited.allowed_memory_maximum(), None);
    }
}
