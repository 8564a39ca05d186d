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
//! of 1 byte to 100 MiB + 4 MiB). The reserved memory is the most used since
//! the last trim rounded up to the pool's 32 MiB granule (the H200, session
//! 60's validation/run/probes/ma60_malloc_async.py: 32 MiB for 1 byte to
//! 6 MiB, kept by a trim with 4 MiB alive, 128 MiB once 104 MiB were alive);
//! where freed allocations leave the live ones spread over more granules
//! than their sum needs, the pool holds more (not modelled, named so by the
//! caller).

use crate::format::format_size;
use crate::stats::{DeviceStats, StatArray};

/// The granule the driver's pool reserves and trims in (the H200's).
const POOL_GRANULE: i64 = 32 << 20;

/// The default pool of the device as the twin keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AsyncPool {
    /// `pytorch_memory_limits[device]`: `None` until
    /// `set_per_process_memory_fraction` (`UINT64_MAX`).
    pub(crate) limit: Option<u64>,
    /// The most used over the intervals closed since the last
    /// `reset_peak_memory_stats` (the requested stat's own peak covers the
    /// open one).
    used_peak: i64,
    /// The reserved memory's lower bound over the intervals closed since
    /// the last trim, or what the trim left.
    reserved_base: i64,
    /// The reserved memory's peak over the intervals closed since the last
    /// `reset_peak_memory_stats`.
    reserved_peak: i64,
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

    /// The reserved memory now: the most used since the last trim, in whole
    /// granules.
    pub(crate) fn reserved(&self, requested: &StatArray) -> i64 {
        let most = self.reserved_base.max(requested.all().peak);
        (most + POOL_GRANULE - 1) / POOL_GRANULE * POOL_GRANULE
    }

    /// `emptyCache`: `cudaMemPoolTrimTo(pool, 0)` leaves what backs the
    /// allocations alive. The caller then resets the requested stat's peak.
    pub(crate) fn trim(&mut self, requested: &StatArray) {
        let all = requested.all();
        let reserved = self.reserved(requested);
        self.reserved_peak = self.reserved_peak.max(reserved);
        self.used_peak = self.used_peak.max(all.peak);
        self.reserved_base = all.current;
    }

    /// `resetPeakStats`: `ReservedMemHigh` and `UsedMemHigh` set to 0, which
    /// the driver takes as their current values. The caller then resets the
    /// requested stat's peak.
    pub(crate) fn reset_peak(&mut self, requested: &StatArray) {
        let reserved = self.reserved(requested);
        self.reserved_base = reserved;
        self.reserved_peak = reserved;
        self.used_peak = requested.all().current;
    }

    /// `getDeviceStats`: the used and reserved memory, all else zero
    /// (`max_split_size` too: `DeviceStats`' default).
    pub(crate) fn stats(&self, requested: &StatArray) -> DeviceStats {
        let all = requested.all();
        let reserved = self.reserved(requested);
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
        let used = |a: &CachingAllocator| total - a.mem_info().0;
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
        assert_eq!(a.mem_info(), (total, total));
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
        assert_eq!(
            e.torch_message(),
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n\
             Currently allocated     : 20.00 GiB\n\
             Requested               : 1 bytes\n\
             Device limit            : 80.00 GiB\n\
             Free (according to CUDA): 60.00 GiB\n\
             PyTorch limit (set by user-supplied memory fraction)\n                        : 20.00 GiB"
        );
        // the setting's fraction is not the backend's
        let cfg = AllocatorConfig::parse("backend:cudaMallocAsync,per_process_memory_fraction:0.5")
            .unwrap();
        let b = CachingAllocator::with_device(cfg, SimDevice::new(total, total));
        assert!(b.memory_fraction() > 1.0);
    }
}
