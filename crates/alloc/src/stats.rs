//! `memory_stats()`: PyTorch's `DeviceStats` (c10/core/CachingDeviceAllocator.h)
//! with the same names, meanings and update rules.

use std::collections::BTreeMap;

/// One statistic: `current`, `peak`, `allocated` (sum of increases) and `freed`
/// (sum of decreases), as `c10::CachingAllocator::Stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Peak value since the start or the last `reset_peak_memory_stats()`.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

impl Stat {
    /// `Stat::increase`.
    #[inline]
    pub fn increase(&mut self, amount: u64) {
        self.current += amount as i64;
        self.peak = self.peak.max(self.current);
        self.allocated += amount as i64;
    }
    /// `Stat::decrease`.
    #[inline]
    pub fn decrease(&mut self, amount: u64) {
        self.current -= amount as i64;
        debug_assert!(self.current >= 0, "negative tracked stat");
        self.freed += amount as i64;
    }
    /// `Stat::decrease` where the count may go below zero: PyTorch's check is
    /// `TORCH_INTERNAL_ASSERT_DEBUG_ONLY`, absent from the wheels.
    #[inline]
    pub fn decrease_unchecked(&mut self, amount: u64) {
        self.current -= amount as i64;
        self.freed += amount as i64;
    }
    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Which pool a stat counts (`StatType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatType {
    /// Every pool (`all`).
    Aggregate = 0,
    /// The small pool, blocks of at most 1 MiB (`small_pool`).
    SmallPool = 1,
    /// The large pool (`large_pool`).
    LargePool = 2,
}

/// A stat for each [`StatType`].
///
/// PyTorch updates the aggregate with the pool's stat on every change
/// (`for_each_selected_stat_type`), so the aggregate's current value and
/// its sums of increases and decreases are always those of the two pools
/// added: only its peak, the most the two ever held together, is kept
/// apart. Every malloc and free updates several arrays (allocated, active,
/// requested, ...); this halves their work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// the small pool's stat and the large pool's
    pools: [Stat; 2],
    /// the aggregate's peak
    all_peak: i64,
}

impl StatArray {
    /// The aggregate (`.all`) stat.
    #[inline]
    pub fn all(&self) -> Stat {
        let [s, l] = &self.pools;
        Stat {
            current: s.current + l.current,
            peak: self.all_peak,
            allocated: s.allocated + l.allocated,
            freed: s.freed + l.freed,
        }
    }
    /// The stat of one pool type.
    pub fn get(&self, t: StatType) -> Stat {
        match t {
            StatType::Aggregate => self.all(),
            StatType::SmallPool => self.pools[0],
            StatType::LargePool => self.pools[1],
        }
    }
    /// An aggregate of `current` and `peak` alone, nothing increased or
    /// freed (`backend:cudaMallocAsync`'s figures; kept as the large
    /// pool's, which [`DeviceStats::memory_stats`] leaves out there).
    pub(crate) fn aggregate_only(current: i64, peak: i64) -> Self {
        let mut a = Self::default();
        a.pools[1].current = current;
        a.pools[1].peak = peak;
        a.all_peak = peak;
        a
    }
    #[inline]
    pub(crate) fn increase(&mut self, small: bool, amount: u64) {
        self.pools[usize::from(!small)].increase(amount);
        let both = self.pools[0].current + self.pools[1].current;
        self.all_peak = self.all_peak.max(both);
    }
    #[inline]
    pub(crate) fn decrease(&mut self, small: bool, amount: u64) {
        self.pools[usize::from(!small)].decrease(amount);
    }
    pub(crate) fn reset_peak(&mut self) {
        for s in &mut self.pools {
            s.reset_peak();
        }
        self.all_peak = self.pools[0].current + self.pools[1].current;
    }
    fn reset_accumulated(&mut self) {
        for s in &mut self.pools {
            s.reset_accumulated();
        }
    }
}

/// All statistics of one device's allocator (`DeviceStats`).
///
/// The active stats ([`Self::active`], [`Self::active_bytes`]) count
/// blocks allocated or still used by another stream after their free. Until
/// a block is first used by another stream they move exactly as the
/// allocation stats do (PyTorch changes both together in
/// `alloc_found_block` and `free_block`, by the same amounts, in the same
/// pool, and resets both together), so they are read from those and kept
/// apart only from then on: a replay's mallocs and frees update two
/// arrays fewer.
#[derive(Debug, Clone, Default)]
pub struct DeviceStats {
    /// COUNT: allocations requested by client code.
    pub allocation: StatArray,
    /// COUNT: segments from `cudaMalloc`.
    pub segment: StatArray,
    /// COUNT: active blocks (allocated or used by a stream), while kept
    /// apart ([`Self::active`]).
    pub(crate) active: StatArray,
    /// COUNT: inactive, split blocks (cannot be released).
    pub inactive_split: StatArray,
    /// SUM: bytes allocated.
    pub allocated_bytes: StatArray,
    /// SUM: bytes reserved (free and used).
    pub reserved_bytes: StatArray,
    /// SUM: bytes in active blocks, while kept apart
    /// ([`Self::active_bytes`]).
    pub(crate) active_bytes: StatArray,
    /// SUM: bytes in inactive, split blocks.
    pub inactive_split_bytes: StatArray,
    /// SUM: bytes requested by client code (before rounding).
    pub requested_bytes: StatArray,
    /// COUNT: failed `cudaMalloc`s that forced a cache flush.
    pub num_alloc_retries: i64,
    /// COUNT: out-of-memory errors raised.
    pub num_ooms: i64,
    /// COUNT: allocations of oversize blocks (>= `max_split_size`).
    pub oversize_allocations: Stat,
    /// COUNT: oversize segments.
    pub oversize_segments: Stat,
    /// COUNT: `synchronize_and_free_events()` calls.
    pub num_sync_all_streams: i64,
    /// COUNT: device allocation calls (`cudaMalloc` and maps).
    pub num_device_alloc: i64,
    /// COUNT: device free calls (`cudaFree` and unmaps).
    pub num_device_free: i64,
    /// SIZE: `max_split_size` (-1 when unlimited, as the snapshot shows it).
    pub max_split_size: i64,
    /// whether a block was ever used by another stream: the active stats
    /// are then kept apart from the allocation stats
    pub(crate) active_apart: bool,
    /// `backend:cudaMallocAsync`'s statistics: the aggregates of the used
    /// and reserved bytes alone ([`DeviceStats::malloc_async`])
    pub(crate) malloc_async: bool,
}

impl PartialEq for DeviceStats {
    fn eq(&self, o: &Self) -> bool {
        // (the active stats as read, however they are kept)
        let Self {
            allocation,
            segment,
            active: _,
            inactive_split,
            allocated_bytes,
            reserved_bytes,
            active_bytes: _,
            inactive_split_bytes,
            requested_bytes,
            num_alloc_retries,
            num_ooms,
            oversize_allocations,
            oversize_segments,
            num_sync_all_streams,
            num_device_alloc,
            num_device_free,
            max_split_size,
            active_apart: _,
            malloc_async,
        } = self;
        *allocation == o.allocation
            && *segment == o.segment
            && self.active() == o.active()
            && *inactive_split == o.inactive_split
            && *allocated_bytes == o.allocated_bytes
            && *reserved_bytes == o.reserved_bytes
            && self.active_bytes() == o.active_bytes()
            && *inactive_split_bytes == o.inactive_split_bytes
            && *requested_bytes == o.requested_bytes
            && *num_alloc_retries == o.num_alloc_retries
            && *num_ooms == o.num_ooms
            && *oversize_allocations == o.oversize_allocations
            && *oversize_segments == o.oversize_segments
            && *num_sync_all_streams == o.num_sync_all_streams
            && *num_device_alloc == o.num_device_alloc
            && *num_device_free == o.num_device_free
            && *max_split_size == o.max_split_size
            && *malloc_async == o.malloc_async
    }
}

impl Eq for DeviceStats {}

impl DeviceStats {
    /// `CudaMallocAsyncAllocator::getDeviceStats`: `allocated_bytes.all` and
    /// `active_bytes.all` the pool's used memory (current, peak),
    /// `reserved_bytes.all` its reserved memory; the rest zero.
    pub(crate) fn malloc_async(used: (i64, i64), reserved: (i64, i64)) -> Self {
        Self {
            allocated_bytes: StatArray::aggregate_only(used.0, used.1),
            reserved_bytes: StatArray::aggregate_only(reserved.0, reserved.1),
            malloc_async: true,
            ..Self::default()
        }
    }

    /// COUNT: active blocks (allocated or used by a stream).
    pub fn active(&self) -> &StatArray {
        if self.active_apart {
            &self.active
        } else {
            &self.allocation
        }
    }

    /// SUM: bytes in active blocks.
    pub fn active_bytes(&self) -> &StatArray {
        if self.active_apart {
            &self.active_bytes
        } else {
            &self.allocated_bytes
        }
    }

    /// From now on keep the active stats apart (a block is used by another
    /// stream, so it may stay active after its free): they start as the
    /// allocation stats they have equalled so far.
    pub(crate) fn keep_active_apart(&mut self) {
        if !self.active_apart {
            self.active = self.allocation;
            self.active_bytes = self.allocated_bytes;
            self.active_apart = true;
        }
    }

    pub(crate) fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `resetPeakStats()`.
    pub(crate) fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.reset_peak();
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// `resetAccumulatedStats()`.
    pub(crate) fn reset_accumulated(&mut self) {
        for a in self.arrays_mut() {
            a.reset_accumulated();
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
    }

    /// `torch.cuda.memory_stats()`: the flat dictionary with PyTorch's key
    /// names (`allocated_bytes.all.peak`, `num_alloc_retries`, ...), as
    /// `torch/cuda/memory.py` builds it from `_cuda_memoryStats`.
    pub fn memory_stats(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let arrays: [(&str, &StatArray); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", self.active()),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", self.active_bytes()),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (name, arr) in arrays {
            for (pool, t) in [
                ("all", StatType::Aggregate),
                ("small_pool", StatType::SmallPool),
                ("large_pool", StatType::LargePool),
            ] {
                let stat = if self.malloc_async && t != StatType::Aggregate {
                    Stat::default()
                } else {
                    arr.get(t)
                };
                put_stat(&mut out, &format!("{name}.{pool}"), &stat);
            }
        }
        put_stat(&mut out, "oversize_allocations", &self.oversize_allocations);
        put_stat(&mut out, "oversize_segments", &self.oversize_segments);
        out.insert("num_alloc_retries".into(), self.num_alloc_retries);
        out.insert("num_ooms".into(), self.num_ooms);
        out.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        out.insert("num_device_alloc".into(), self.num_device_alloc);
        out.insert("num_device_free".into(), self.num_device_free);
        out.insert("max_split_size".into(), self.max_split_size);
        out
    }
}

fn put_stat(out: &mut BTreeMap<String, i64>, prefix: &str, s: &Stat) {
    out.insert(format!("{prefix}.current"), s.current);
    out.insert(format!("{prefix}.peak"), s.peak);
    out.insert(format!("{prefix}.allocated"), s.allocated);
    out.insert(format!("{prefix}.freed"), s.freed);
}
