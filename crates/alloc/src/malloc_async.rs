//! `backend:cudaMallocAsync` (c10/cuda/CUDAMallocAsyncAllocator.cpp,
//! PyTorch 2.11): every request is a `cudaMallocAsync` of its exact size
//! from the device's default pool, whose release threshold PyTorch sets to
//! `UINT64_MAX` (`lazy_init_device`): freed memory stays in the pool until
//! `empty_cache()` trims it (`cudaMemPoolTrimTo(pool, 0)`).
//!
//! What PyTorch reports (`getDeviceStats`): `allocated_bytes.all` and
//! `active_bytes.all` are the pool's `UsedMemCurrent`/`UsedMemHigh`,
//! `reserved_bytes.all` its `ReservedMemCurrent`/`ReservedMemHigh`; every
//! other statistic is zero. The used memory is the bytes requested
//! (`pytorch_used_bytes`, which the limit and the out-of-memory message
//! read; the H200's `UsedMemCurrent` is that sum, byte for byte, for sizes
//! of 1 byte to 100 MiB + 4 MiB). The reserved memory is the pool's
//! mapped 32 MiB granules ([`PoolLayout`]): a block lies in the pool's
//! address space, across granules where it falls so, and a trim unmaps
//! every granule that no live block touches (the H100's
//! validation/run/probes/mx61_async_pool.py,
//! fixtures/run/probes/mx61_async_pool_h100.txt).

use std::collections::{BTreeMap, HashMap};

use crate::format::format_size;
use crate::stats::{DeviceStats, StatArray};

/// The granule the driver's pool reserves and trims in (the H200's and the
/// H100's).
const POOL_GRANULE: u64 = 32 << 20;

/// A block's alignment in the pool: the 256 bytes the CUDA programming
/// guide promises for every allocation (the driver's own sub-allocation
/// granularity is unmeasured).
const POOL_ALIGN: u64 = 256;

/// The device memory beyond the pool that the first allocation takes and
/// keeps (`cudaMemGetInfo`'s used memory less `memory_reserved()`: 70 MiB
/// from the first allocation on, through every trim, on the H100,
/// mx61_async_pool_h100.txt): the device's stream pools, which
/// `lazy_init_device`'s `getStreamFromPool` makes. A side stream made
/// first takes them and the first allocation then adds nothing, as the
/// native backend's first side stream takes them too
/// (mx2_stream_pool_probe_s61_h100.txt).
const POOL_INIT_BYTES: u64 = crate::STREAM_POOLS_BYTES;

/// Where the pool's live blocks lie and which granules it has mapped. The
/// H100's pool (mx61_async_pool_h100.txt) packs blocks in address order
/// across granule boundaries (three 20 MiB blocks: 64 MiB; the first and
/// last freed, a trim keeps both granules the middle one touches), reuses
/// a freed hole only where the block fits it (a 12 MiB block beside holes
/// of 4 and 10 MiB, a 30 MiB block beside four 8 MiB holes: a granule
/// more). A block goes to the first free range in mapped granules that
/// holds it, or else the first free range that holds it, its granules
/// mapped (first fit as opposed to best fit, and where a grown pool puts
/// the block, are unmeasured: the probe's lines read the same either way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PoolLayout {
    /// offset in the pool -> aligned length, of every live block
    live: BTreeMap<u64, u64>,
    /// the twin's address of a live block -> its offset in the pool
    at: HashMap<u64, u64>,
    /// whether each granule (from offset 0) is mapped
    mapped: Vec<bool>,
    /// how many are
    mapped_count: u64,
}

impl PoolLayout {
    fn granules(off: u64, len: u64) -> std::ops::Range<usize> {
        (off / POOL_GRANULE) as usize..(off + len).div_ceil(POOL_GRANULE) as usize
    }

    fn is_mapped(&self, g: usize) -> bool {
        self.mapped.get(g).copied().unwrap_or(false)
    }

    /// The free ranges between live blocks, the last one unbounded.
    fn gaps(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ends = std::iter::once(0).chain(self.live.iter().map(|(&o, &l)| o + l));
        let starts = self.live.keys().copied().chain(std::iter::once(u64::MAX));
        ends.zip(starts).filter(|&(s, e)| e > s)
    }

    /// The first offset in `(start, end)` where `len` bytes lie in mapped
    /// granules alone.
    fn fit_mapped(&self, (start, end): (u64, u64), len: u64) -> Option<u64> {
        let mut pos = start;
        while end.checked_sub(pos).is_some_and(|room| room >= len) {
            let g = Self::granules(pos, len);
            if g.start >= self.mapped.len() {
                return None;
            }
            match g.clone().rev().find(|&i| !self.is_mapped(i)) {
                None => return Some(pos),
                Some(u) => pos = (u as u64 + 1) * POOL_GRANULE,
            }
        }
        None
    }

    /// `cudaMallocAsync(size)` of the block the twin keeps at `addr`.
    fn malloc(&mut self, addr: u64, size: u64) {
        let len = size.max(1).next_multiple_of(POOL_ALIGN);
        let off = self
            .gaps()
            .find_map(|gap| self.fit_mapped(gap, len))
            .or_else(|| self.gaps().find(|&(s, e)| e - s >= len).map(|g| g.0))
            .expect("the last free range is unbounded");
        for g in Self::granules(off, len) {
            if g >= self.mapped.len() {
                self.mapped.resize(g + 1, false);
            }
            if !self.mapped[g] {
                self.mapped[g] = true;
                self.mapped_count += 1;
            }
        }
        self.live.insert(off, len);
        self.at.insert(addr, off);
    }

    /// `cudaFreeAsync` of the block at the twin's `addr` (once only).
    fn free(&mut self, addr: u64) {
        if let Some(off) = self.at.remove(&addr) {
            self.live.remove(&off);
        }
    }

    /// `cudaMemPoolTrimTo(pool, 0)`: every granule no live block touches
    /// is unmapped.
    fn trim(&mut self) {
        let mut keep = vec![false; self.mapped.len()];
        for (&off, &len) in &self.live {
            for g in Self::granules(off, len) {
                keep[g] = true;
            }
        }
        while keep.last() == Some(&false) {
            keep.pop();
        }
        self.mapped_count = keep.iter().filter(|&&k| k).count() as u64;
        self.mapped = keep;
    }

    fn reserved(&self) -> i64 {
        (self.mapped_count * POOL_GRANULE) as i64
    }
}

/// The default pool of the device as the twin keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AsyncPool {
    /// `pytorch_memory_limits[device]`: `None` until
    /// `set_per_process_memory_fraction` (`UINT64_MAX`).
    pub(crate) limit: Option<u64>,
    /// The most used over the intervals closed since the last
    /// `reset_peak_memory_stats` (the requested stat's own peak covers the
    /// open one).
    used_peak: i64,
    /// The reserved memory's peak since the last `reset_peak_memory_stats`.
    reserved_peak: i64,
    /// The live blocks and mapped granules.
    layout: PoolLayout,
    /// `lazy_init_device` has run (the first allocation).
    initialized: bool,
}

/// Why a `cudaMallocAsync` failed: the figures of PyTorch's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncOom {
    /// `pytorch_used_bytes`: the bytes requested and not freed.
    pub used: u64,
    /// The request.
    pub requested: u64,
    /// `pytorch_memory_limits`.
    pub limit: u64,
}

impl AsyncPool {
    /// `mallocAsync`: over the limit, `cudaErrorMemoryAllocation` before the
    /// driver is asked (`pytorch_used_bytes + size > pytorch_memory_limits`).
    pub(crate) fn over_limit(&self, used: u64, size: u64) -> Option<AsyncOom> {
        let limit = self.limit?;
        (used.saturating_add(size) > limit).then_some(AsyncOom {
            used,
            requested: size,
            limit,
        })
    }

    /// The out-of-memory figures of a request of `size` bytes.
    pub(crate) fn oom(&self, used: u64, size: u64) -> AsyncOom {
        AsyncOom {
            used,
            requested: size,
            limit: self.limit.unwrap_or(u64::MAX),
        }
    }

    /// The reserved memory now: the pool's mapped granules.
    pub(crate) fn reserved(&self) -> i64 {
        self.layout.reserved()
    }

    /// The device memory the pool and its first allocation hold
    /// (`cudaMemGetInfo` sees them): the mapped granules and
    /// [`POOL_INIT_BYTES`] from the first allocation on.
    pub(crate) fn device_bytes(&self) -> u64 {
        self.reserved() as u64 + if self.initialized { POOL_INIT_BYTES } else { 0 }
    }

    /// `mallocAsync`'s `lazy_init_device`, before the limit's check.
    pub(crate) fn init(&mut self) {
        self.initialized = true;
    }

    /// `cudaMallocAsync` of `size` bytes for the block at the twin's `addr`.
    pub(crate) fn malloc(&mut self, addr: u64, size: u64) {
        self.layout.malloc(addr, size);
        self.reserved_peak = self.reserved_peak.max(self.reserved());
    }

    /// `cudaFreeAsync` of the block at the twin's `addr` (a second call is
    /// a no-op).
    pub(crate) fn free(&mut self, addr: u64) {
        self.layout.free(addr);
    }

    /// `emptyCache`: `cudaMemPoolTrimTo(pool, 0)` unmaps the granules no
    /// live block touches. The caller then resets the requested stat's peak.
    pub(crate) fn trim(&mut self, requested: &StatArray) {
        self.used_peak = self.used_peak.max(requested.all().peak);
        self.layout.trim();
    }

    /// `resetPeakStats`: `ReservedMemHigh` and `UsedMemHigh` set to 0, which
    /// the driver takes as their current values. The caller then resets the
    /// requested stat's peak.
    pub(crate) fn reset_peak(&mut self, requested: &StatArray) {
        self.reserved_peak = self.reserved();
        self.used_peak = requested.all().current;
    }

    /// `getDeviceStats`: the used and reserved memory, all else zero
    /// (`max_split_size` too: `DeviceStats`' default).
    pub(crate) fn stats(&self, requested: &StatArray) -> DeviceStats {
        let all = requested.all();
        let reserved = self.reserved();
        DeviceStats::malloc_async(
            (all.current, self.used_peak.max(all.peak)),
            (reserved, self.reserved_peak.max(reserved)),
        )
    }
}

impl AsyncOom {
    /// `mallocAsync`'s message (`TORCH_CHECK_WITH(OutOfMemoryError, ...)`)
    /// for device 0 of `device_total` bytes with `device_free` free.
    pub fn message(&self, device_total: u64, device_free: u64) -> String {
        format!(
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n\
             Currently allocated     : {}\n\
             Requested               : {}\n\
             Device limit            : {}\n\
             Free (according to CUDA): {}\n\
             PyTorch limit (set by user-supplied memory fraction)\n                        : {}",
            format_size(self.used),
            format_size(self.requested),
            format_size(device_total),
            format_size(device_free),
            format_size(self.limit)
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocatorConfig, CachingAllocator, SimDevice};

    const MIB: u64 = 1 << 20;

    fn async_allocator(total: u64) -> CachingAllocator {
        let cfg = AllocatorConfig::parse("backend:cudaMallocAsync").unwrap();
        CachingAllocator::with_device(cfg, SimDevice::new(total, total))
    }

    fn figures(a: &CachingAllocator) -> [i64; 4] {
        let s = a.reported_stats();
        [
            s.allocated_bytes.all().current,
            s.allocated_bytes.all().peak,
            s.reserved_bytes.all().current,
            s.reserved_bytes.all().peak,
        ]
    }

    #[test]
    fn used_memory_is_the_bytes_requested_and_reserved_the_most_since_the_trim() {
        let g = 32 * MIB as i64;
        let mut a = async_allocator(80 << 30);
        let small = a.malloc(1000, 0).unwrap();
        let big = a.malloc(3 * MIB + 1, 0).unwrap();
        let both = (1000 + 3 * MIB + 1) as i64;
        // no 512-byte rounding, no 20 MiB segment: the pool's 32 MiB granule
        assert_eq!(figures(&a), [both, both, g, g]);
        a.free(big).unwrap();
        // the pool keeps what was freed (release threshold UINT64_MAX)
        assert_eq!(figures(&a), [1000, both, g, g]);
        a.empty_cache();
        assert_eq!(figures(&a), [1000, both, g, g]);
        a.reset_peak_stats();
        assert_eq!(figures(&a), [1000, 1000, g, g]);
        let again = a.malloc(40 * MIB, 0).unwrap();
        a.free(again).unwrap();
        let with = 1000 + 40 * MIB as i64;
        assert_eq!(figures(&a), [1000, with, 2 * g, 2 * g]);
        // a reset keeps the reserved memory, its peak now its current value
        a.reset_peak_stats();
        assert_eq!(figures(&a), [1000, 1000, 2 * g, 2 * g]);
        a.empty_cache();
        assert_eq!(figures(&a), [1000, 1000, g, 2 * g]);
        a.free(small).unwrap();
        a.empty_cache();
        assert_eq!(figures(&a), [0, 1000, 0, 2 * g]);
    }

    #[test]
    fn the_h200s_pool_figures() {
        // session 60's ma60_malloc_async.py on the H200: used memory the bytes requested, the
        // pool reserved in 32 MiB granules
        let mut a = async_allocator(150_109_880_320);
        let mut held = Vec::new();
        let mut used = 0;
        for n in [1, 512, 513, 4096, MIB + 1, 2 * MIB + 1, 3 * MIB + 1] {
            held.push(a.malloc(n, 0).unwrap());
            used += n as i64;
            assert_eq!(figures(&a)[..3], [used, used, 33_554_432]);
        }
        for (i, h) in held.iter().enumerate() {
            if i % 2 == 1 {
                a.free(*h).unwrap();
            }
        }
        assert_eq!(figures(&a), [4_194_820, 6_296_581, 33_554_432, 33_554_432]);
        a.empty_cache();
        assert_eq!(figures(&a), [4_194_820, 6_296_581, 33_554_432, 33_554_432]);
        a.reset_peak_stats();
        assert_eq!(figures(&a), [4_194_820, 4_194_820, 33_554_432, 33_554_432]);
        let x = a.malloc(100 * MIB, 0).unwrap();
        assert_eq!(figures(&a)[..3], [109_052_420, 109_052_420, 134_217_728]);
        a.free(x).unwrap();
        assert_eq!(
            figures(&a),
            [4_194_820, 109_052_420, 134_217_728, 134_217_728]
        );
    }

    #[test]
    fn mem_get_info_sees_the_pools_reserved_memory_not_the_twins_segments() {
        // cudaMemGetInfo is the device's: the pool's reserved memory stays mapped until a trim
        // (release threshold UINT64_MAX); the H200's used memory grew by 96 MiB when the pool
        // went from 32 to 128 MiB (ma60_malloc_async.py)
        let total = 150_109_880_320;
        let mut a = async_allocator(total);
        // (less the 70 MiB the first allocation takes beyond the pool, the H100's)
        let used = |a: &CachingAllocator| total - a.mem_info().0 - 70 * MIB;
        let small = a.malloc(1, 0).unwrap();
        assert_eq!(used(&a), 32 * MIB);
        let big = a.malloc(100 * MIB, 0).unwrap();
        assert_eq!(used(&a), 128 * MIB);
        a.free(big).unwrap();
        assert_eq!(used(&a), 128 * MIB);
        a.empty_cache();
        assert_eq!(used(&a), 32 * MIB);
        a.free(small).unwrap();
        a.empty_cache();
        assert_eq!(a.mem_info(), (total - 70 * MIB, total));
    }

    /// validation/run/probes/mx61_async_pool.py step by step: its lines.
    fn mx61_async_pool_lines(total: u64) -> Vec<String> {
        let mut a = async_allocator(total);
        let mut base = None;
        let mut out = Vec::new();
        let mut line = |a: &CachingAllocator, case: &str, step: &str| {
            let (free, total) = a.mem_info();
            let s = a.reported_stats();
            let r = s.reserved_bytes.all().current;
            let other = (total - free) as i64 - r;
            let base = *base.get_or_insert(other);
            out.push(format!(
                "{case} {step}: allocated {} reserved {r} other_delta {}",
                s.allocated_bytes.all().current,
                other - base
            ));
        };
        let start = |a: &mut CachingAllocator| {
            a.empty_cache();
            a.reset_peak_stats();
        };
        start(&mut a);
        line(&a, "start", "nothing");
        let x = a.malloc(1, 0).unwrap();
        line(&a, "start", "1 B");
        a.free(x).unwrap();
        start(&mut a);
        line(&a, "start", "trim");
        for n in [33 * MIB, 65 * MIB, (1 << 30) + 1] {
            start(&mut a);
            let x = a.malloc(n, 0).unwrap();
            line(&a, "sizes", &format!("{n} alive"));
            a.free(x).unwrap();
            line(&a, "sizes", &format!("{n} freed"));
        }
        start(&mut a);
        line(&a, "sizes", "trim");
        let b: Vec<_> = (0..3).map(|_| a.malloc(20 * MIB, 0).unwrap()).collect();
        line(&a, "holes", "three 20 MiB");
        a.free(b[0]).unwrap();
        a.free(b[2]).unwrap();
        line(&a, "holes", "first and last freed");
        start(&mut a);
        line(&a, "holes", "trim");
        a.free(b[1]).unwrap();
        start(&mut a);
        line(&a, "holes", "all freed, trim");
        let (x, y) = (
            a.malloc(20 * MIB, 0).unwrap(),
            a.malloc(10 * MIB, 0).unwrap(),
        );
        line(&a, "misfit", "20 + 10 MiB");
        a.free(x).unwrap();
        line(&a, "misfit", "20 MiB freed");
        let z = a.malloc(24 * MIB, 0).unwrap();
        line(&a, "misfit", "24 MiB");
        let w = a.malloc(16 * MIB, 0).unwrap();
        line(&a, "misfit", "16 MiB");
        let e = a.malloc(12 * MIB, 0).unwrap();
        line(&a, "misfit", "12 MiB");
        for p in [y, z, w, e] {
            a.free(p).unwrap();
        }
        start(&mut a);
        line(&a, "misfit", "all freed, trim");
        let blocks: Vec<_> = (0..8).map(|_| a.malloc(8 * MIB, 0).unwrap()).collect();
        line(&a, "reuse", "8 x 8 MiB");
        for p in blocks.iter().skip(1).step_by(2) {
            a.free(*p).unwrap();
        }
        line(&a, "reuse", "every other freed");
        let big = a.malloc(30 * MIB, 0).unwrap();
        line(&a, "reuse", "30 MiB");
        for p in blocks.iter().step_by(2).chain([&big]) {
            a.free(*p).unwrap();
        }
        start(&mut a);
        line(&a, "reuse", "all freed, trim");
        out
    }

    #[test]
    fn the_h100s_pool_granules_and_first_allocation() {
        // the H100 (fixtures/run/probes/mx61_async_pool_h100.txt): a trim keeps every granule
        // a live block touches, a freed hole takes a block that fits it or the pool maps a
        // granule more, and the first allocation takes 70 MiB beyond the pool for good
        let gpu = include_str!("../../../fixtures/run/probes/mx61_async_pool_h100.txt");
        let twin = mx61_async_pool_lines(85_017_493_504);
        assert_eq!(twin, gpu.lines().collect::<Vec<_>>());
    }

    #[test]
    fn a_block_used_on_another_stream_is_unused_at_its_free() {
        // freeAsync frees it on a stream that waits for the others: pytorch_used_bytes drops at
        // once (the native allocator keeps it allocated until its events complete)
        let mut a = async_allocator(80 << 30);
        let x = a.malloc(4 * MIB, 0).unwrap();
        a.record_stream(x, 7).unwrap();
        a.free(x).unwrap();
        let (n, g) = (4 * MIB as i64, 32 * MIB as i64);
        assert_eq!(figures(&a), [0, n, g, g]);
        a.malloc(MIB, 0).unwrap();
        assert_eq!(figures(&a), [MIB as i64, n, g, g]);
    }

    #[test]
    fn every_other_statistic_is_zero() {
        let mut a = async_allocator(80 << 30);
        a.malloc(5 * MIB, 0).unwrap();
        a.malloc(100, 0).unwrap();
        let m = a.reported_stats().memory_stats();
        let n = (5 * MIB + 100) as i64;
        for (k, v) in &m {
            let expected = match k.as_str() {
                "allocated_bytes.all.current"
                | "allocated_bytes.all.peak"
                | "active_bytes.all.current"
                | "active_bytes.all.peak" => n,
                "reserved_bytes.all.current" | "reserved_bytes.all.peak" => 32 * MIB as i64,
                _ => 0,
            };
            assert_eq!(*v, expected, "{k}");
        }
        // the same keys as the native allocator's
        let native = CachingAllocator::new(AllocatorConfig::default());
        assert!(native.reported_stats().memory_stats().keys().eq(m.keys()));
        // memory_summary() as PyTorch prints it from those keys: the pools' rows zero
        let summary = crate::memory_summary(&a.reported_stats(), 0, false);
        let large: Vec<&str> = summary
            .lines()
            .filter(|l| l.contains("from large pool"))
            .collect();
        let zero = |l: &&str| {
            l.split('|')
                .skip(2)
                .all(|c| matches!(c.split_whitespace().next(), None | Some("0")))
        };
        assert!(large.len() == 9 && large.iter().all(zero), "{summary}");
        assert!(
            summary.contains("Allocated memory      |   5120 KiB |"),
            "{summary}"
        );
    }

    #[test]
    fn the_fraction_limits_the_bytes_requested_with_malloc_asyncs_message() {
        let total = 80u64 << 30;
        let mut a = async_allocator(total);
        assert_eq!(a.memory_fraction(), u64::MAX as f64 / total as f64);
        a.set_memory_fraction(0.25);
        assert_eq!(a.memory_fraction(), 0.25);
        // exactly at the limit: allowed (`used + size > limit` fails)
        a.malloc(10 << 30, 0).unwrap();
        a.malloc((10 << 30) - 1, 0).unwrap();
        a.malloc(1, 0).unwrap();
        let e = a.malloc(1, 0).unwrap_err();
        // free: the pool's 20 GiB and the granule the 1-byte block starts, less the first
        // allocation's 70 MiB
        assert_eq!(
            e.torch_message(),
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n\
             Currently allocated     : 20.00 GiB\n\
             Requested               : 1 bytes\n\
             Device limit            : 80.00 GiB\n\
             Free (according to CUDA): 59.90 GiB\n\
             PyTorch limit (set by user-supplied memory fraction)\n                        : 20.00 GiB"
        );
        // the setting's fraction is not the backend's
        let cfg = AllocatorConfig::parse("backend:cudaMallocAsync,per_process_memory_fraction:0.5")
            .unwrap();
        let b = CachingAllocator::with_device(cfg, SimDevice::new(total, total));
        assert!(b.memory_fraction() > 1.0);
    }
}
