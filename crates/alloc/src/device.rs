//! What the allocator asks of the device: `cudaMalloc`/`cudaFree` and, for
//! expandable segments, address reservation and page mapping. The twin is
//! generic over it, so the same rules run on a simulated GPU of a given
//! capacity ([`SimDevice`]) or on a recorded trace that dictates addresses.

/// The driver calls the caching allocator makes.
pub trait Device {
    /// `cudaMalloc(size)`: the address, or `None` when the device is full.
    fn malloc(&mut self, size: u64) -> Option<u64>;
    /// `cudaFree`.
    fn free(&mut self, addr: u64, size: u64);
    /// `cuMemAddressReserve(size)`: a virtual range for an expandable
    /// segment, or `None` when no range of that size is left (the
    /// allocator then fails the malloc as out of memory).
    fn reserve(&mut self, size: u64) -> Option<u64>;
    /// `cuMemCreate` + `cuMemMap` of `size` bytes of physical pages at `addr`;
    /// `false` when the device has no memory left.
    fn map(&mut self, addr: u64, size: u64) -> bool;
    /// `cuMemUnmap` + `cuMemRelease`.
    fn unmap(&mut self, addr: u64, size: u64);
    /// `cudaMemGetInfo`: (free, total) bytes.
    fn mem_info(&self) -> (u64, u64);
}

use std::collections::HashMap;

use crate::driver_va::DriverVa;

/// A simulated GPU: `total` bytes as `cudaMemGetInfo` reports them, of which
/// `capacity` can be allocated (the rest is the CUDA context and driver).
///
/// `cudaMalloc` places segments by the CUDA driver's rule (`driver_va.rs`:
/// 32 MiB chunks top-down, holes of the newest chunk first): the allocator
/// breaks ties between equal-size free blocks by address, so where segments
/// lie changes which blocks get reused. [`SimDevice::new`] starts in the
/// state a process is in once its first cuBLAS call has run (rule 5 there);
/// [`SimDevice::with_driver_placement`] starts from a fresh context
/// instead, as a process before its first kernels, which
/// [`SimDevice::first_kernels`] then marks (rule 6; the estimate's
/// workload). The driver's own
/// allocations in a process that launches kernels (kernel modules, the
/// autograd thread's cuBLAS handle) are not seen by the allocator: their
/// memory is taken when the caller says so ([`SimDevice::driver_alloc`]),
/// their addresses are not simulated.
#[derive(Debug, Clone)]
pub struct SimDevice {
    total: u64,
    capacity: u64,
    used: u64,
    next_addr: u64,
    driver: DriverVa,
    /// where segments go that the address space below the context cannot
    /// hold (only sizes no GPU has, on an unlimited device)
    beyond: u64,
    /// started as a fresh process ([`SimDevice::with_driver_placement`]):
    /// [`SimDevice::recycled`] starts there again
    fresh: bool,
    /// each live allocation's size by its address, as the driver knows it
    /// (`cudaFree` frees the allocation a pointer begins, whatever the caller
    /// takes its size to be)
    live: HashMap<u64, u64>,
}

/// Bytes an unlimited device has, total and allocatable: 64 PiB, small
/// enough that sums of sizes never overflow and that the address ranges
/// expandable segments reserve (1 1/8 of the total each) fit by the
/// hundred in the address space. A workload that needs more (a tensor may
/// not pass 1 PiB, but thousands of them can) is an error, not a figure
/// (`vramscope_models::estimate`).
pub const UNLIMITED_BYTES: u64 = 1 << 56;

/// Physical allocation granularity of the CUDA driver: 2 MiB.
const GRANULE: u64 = 2 * 1024 * 1024;
/// The CUDA context's anchor (segments grow down from here; 64 MiB aligned
/// like the traces' anchors). The context's own chunk reaches 96 MiB above
/// it, with a hole there that small segments take
/// ([`DriverVa::CONTEXT_ABOVE_ANCHOR`]); every other address the driver
/// rule hands out lies below it.
const DRIVER_ANCHOR: u64 = 0x7f80_0000_0000;
/// Where `cuMemAddressReserve` ranges start, counting up, far below every
/// `cudaMalloc` segment: measured, the first reservation of every
/// expandable-segments trace on the H100 (`fixtures/alloc/expandable.pickle`,
/// `training_expandable.pickle`) and the H200
/// (`fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz`,
/// blind54/bb05's). It orders an expandable segment's blocks before an
/// ordinary segment's of the same size in a pool holding both (settings
/// changed at run time).
const RESERVE_BASE: u64 = 0x3_0200_0000;
/// Each reservation starts on a 32 MiB boundary: measured, consecutive
/// reservations lie 1 1/8 of the memory in pages apart, rounded up to it
/// (`0x1646000000` on the H100, `0x2752000000` and `0x2754000000` for 2 and
/// 20 MiB pages on the H200, in the same traces).
const RESERVE_ALIGN: u64 = 32 * 1024 * 1024;
/// Reservations that would reach this go above the driver's range instead
/// ([`RESERVE_HIGH`]): only on a device of a size no GPU has (an unlimited
/// one's 72 PiB each), so that they never overlap a `cudaMalloc` segment.
const RESERVE_LOW_END: u64 = DRIVER_ANCHOR / 2;
/// Above every `cudaMalloc` segment (the context's chunk included).
const RESERVE_HIGH: u64 = DRIVER_ANCHOR + DriverVa::CONTEXT_ABOVE_ANCHOR;
/// Above every address the driver rule hands out and every reservation.
const BEYOND_ADDR: u64 = 1 << 63;

impl SimDevice {
    /// A device with `capacity` allocatable bytes out of `total`, as in a
    /// process that has run its first cuBLAS call (see the type's doc).
    pub fn new(total: u64, capacity: u64) -> Self {
        Self::with(
            total,
            capacity,
            DriverVa::after_cublas(DRIVER_ANCHOR),
            false,
        )
    }
    /// A device whose `cudaMalloc` places segments as the CUDA driver does
    /// in a fresh process, before its first kernels (see `driver_va.rs` for
    /// the rules and the traces they come from): the context still holds
    /// its range until [`SimDevice::first_kernels`]. `cuMemAddressReserve`
    /// still counts up from its own base, as the driver's reservations for
    /// expandable segments lie apart.
    pub fn with_driver_placement(total: u64, capacity: u64) -> Self {
        Self::with(total, capacity, DriverVa::new(DRIVER_ANCHOR), true)
    }
    fn with(total: u64, capacity: u64, driver: DriverVa, fresh: bool) -> Self {
        Self {
            total,
            capacity: capacity.min(total),
            used: 0,
            next_addr: RESERVE_BASE,
            driver,
            beyond: BEYOND_ADDR,
            fresh,
            live: HashMap::new(),
        }
    }
    /// Whether the context's whole range would go back (no segment at B-2
    /// now; `driver_va.rs`, rule 6), rather than become a hole of the
    /// context's chunk. `false` once given back. [`SimDevice::first_kernels`]
    /// reads B-2 again after the driver's own 2 MiB, which lands there when
    /// the context's chunk has the only free hole: then the release it was
    /// deferred for makes a hole after all (in none of the recorded
    /// workloads).
    pub fn releases_whole(&self) -> bool {
        self.driver.releases_whole()
    }
    /// The process's first kernels have run: the CUDA context gives back the
    /// range it held (`driver_va.rs`, rule 6). A no-op on a device that
    /// started after them ([`SimDevice::new`]) or has done it already;
    /// `true` when it gave the range back.
    pub fn first_kernels(&mut self) -> bool {
        self.driver.release_context()
    }
    /// Lay out the top 8 MiB of the driver's pool from its reservation on
    /// (`driver_va.rs`, rule 14): a 6 MiB hole that 2 MiB segments take.
    pub fn lay_out_pool_top(&mut self) {
        self.driver.lay_out_pool_top();
    }
    /// The process launches its first kernel: the driver takes 2 MiB of
    /// its own (`driver_va.rs`, rule 6), whether or not the context gives
    /// its range back then ([`SimDevice::first_kernels`]). A no-op on a
    /// device that started after it ([`SimDevice::new`]) or once done.
    pub fn first_launch(&mut self) {
        self.driver.first_launch();
    }
    /// The process creates its first cuBLAS handle: the driver reserves
    /// address space among the segments (`driver_va.rs`, rule 8). A no-op
    /// on a device that started after it ([`SimDevice::new`]) or has done
    /// it already; `true` when it did it.
    pub fn first_cublas(&mut self) -> bool {
        self.driver.first_cublas()
    }
    /// A thread starts and `malloc`s: its `stack` bytes and its glibc
    /// arena take address space for good (`driver_va.rs`). `None` on a
    /// device that started after the process's first kernels.
    pub fn thread_started(&mut self, stack: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.thread(stack)
    }
    /// A thread starts: its `stack` bytes take address space for good; its
    /// arena waits for its first `malloc` ([`SimDevice::thread_arena`]).
    /// `None` on a device that started after the process's first kernels.
    pub fn thread_stack(&mut self, stack: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.thread_stack(stack)
    }
    /// A started thread's first `malloc` makes its glibc arena, for good
    /// (`driver_va.rs`). `None` on a device that started after the
    /// process's first kernels.
    pub fn thread_arena(&mut self) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.thread_arena()
    }
    /// glibc maps `len` bytes of host memory (a CPU tensor's `mmap`ed
    /// chunk) in the process's address space, where `cudaMalloc`'s chunks
    /// lie too (`driver_va.rs`, rule 7): the address, which
    /// [`SimDevice::host_unmap`] takes back.
    pub fn host_map(&mut self, len: u64) -> Option<u64> {
        self.driver.host_map(len)
    }
    /// Host memory glibc mapped before the CUDA context existed (a CPU
    /// tensor a program made before its first CUDA call), `len` bytes
    /// directly above the context's range and those mapped so far this way,
    /// lowest first (`driver_va.rs`, rules 7 and 11; the lowest at `above`
    /// over the context's anchor, default the measured median): the address, which
    /// [`SimDevice::host_unmap`] takes back. `None` on a device that started
    /// after the process's first kernels, or once a segment was placed.
    pub fn host_map_above(&mut self, len: u64, above: Option<u64>) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.host_map_above(len, above)
    }
    /// A mapping of `len` bytes made before the CUDA context, at `offset`
    /// over the context's anchor (`driver_va.rs`, rule 17): its address,
    /// which [`SimDevice::host_unmap`] takes back. `None` on a device that
    /// started after the process's first kernels, or once a segment was placed.
    pub fn host_map_at(&mut self, offset: u64, len: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.host_map_at(offset, len)
    }
    /// Address space at `offset` over the context's anchor that no mapping
    /// made before the context holds (rule 17): free for chunks.
    pub fn host_free_at(&mut self, offset: u64, len: u64) {
        if self.fresh {
            self.driver.host_free_at(offset, len);
        }
    }
    /// glibc unmaps the host memory [`SimDevice::host_map`] mapped at `addr`
    /// (the CPU tensor freed): its range is free for chunks again.
    pub fn host_unmap(&mut self, addr: u64) {
        self.driver.free(addr);
    }
    /// `cudaHostAlloc` maps `len` bytes of page-locked host memory (a
    /// block of PyTorch's caching host allocator) among the segments,
    /// placed as a segment is; no device memory is used (`driver_va.rs`,
    /// rule 16): the address, which [`SimDevice::host_unmap`] takes back
    /// (`cudaFreeHost`). `None` when the address space is exhausted.
    pub fn pinned_map(&mut self, len: u64) -> Option<u64> {
        self.driver.malloc(len)
    }
    /// Whether a page-locked buffer of `len` bytes goes to the driver's
    /// pool's top, not laid out, rather than where a segment would go
    /// (`driver_va.rs`, rules 14 and 16: no chunk made after the pool has a
    /// hole that fits it).
    pub fn pool_top_first(&self, len: u64) -> bool {
        self.driver.pool_top_first(len)
    }
    /// The driver takes `len` bytes of address space for good, placed as a
    /// segment is (`driver_va.rs`, rules 2, 1 and 3): its device memory or
    /// page-locked buffers at a first cuDNN handle (the engine's
    /// `Runtime::cudnn_rnn`). The address; `None` on a device that started
    /// after the process's first kernels ([`SimDevice::new`]) or when the
    /// address space is exhausted.
    pub fn driver_map(&mut self, len: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.malloc(len)
    }
    /// Whether the process has launched no kernel yet (`driver_va.rs`, rule
    /// 6): `false` on a device that started after its first kernels.
    pub fn kernels_pending(&self) -> bool {
        self.driver.launch_pending()
    }
    /// The dynamic loader maps a library of `span` bytes (segments 2 MiB
    /// aligned) among the segments, for good (`driver_va.rs`, rule 9): its
    /// address. `None` on a device that started after the process's first
    /// kernels ([`SimDevice::new`]), whose libraries are taken as loaded,
    /// or when the address space is exhausted.
    pub fn load_library(&mut self, span: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.library(span)
    }
    /// The process maps `span` bytes among the segments for good: a
    /// library whose segments are page aligned (`libtriton.so`, one `mmap`
    /// of its span) or host memory never freed (a kernel module's image),
    /// placed as host memory is (`driver_va.rs`, rules 10 and 12). `None` on a device that started after the process's first
    /// kernels ([`SimDevice::new`]) or when the address space is exhausted.
    pub fn map_library(&mut self, span: u64) -> Option<u64> {
        if !self.fresh {
            return None;
        }
        self.driver.host_map(span)
    }
    /// A device that starts as this one did ([`Self::new`] or
    /// [`Self::with_driver_placement`]) with `total` and `capacity`, keeping
    /// the buffers this device's
    /// address space grew ([`CachingAllocator::renew_recycling`] passes it
    /// to a renewed allocator). This device is left without an address
    /// space, fit only to be dropped (every segment it placed after would
    /// go above the driver's range).
    ///
    /// [`CachingAllocator::renew_recycling`]: crate::CachingAllocator::renew_recycling
    pub fn recycled(&mut self, total: u64, capacity: u64) -> Self {
        let mut driver = std::mem::replace(&mut self.driver, DriverVa::empty());
        driver.reset(DRIVER_ANCHOR, self.fresh);
        Self::with(total, capacity, driver, self.fresh)
    }
    /// The driver takes `bytes` of device memory outside the allocator (a
    /// cuBLAS handle's state, its kernels' local memory): counted as used,
    /// so `cudaMemGetInfo` and what is left for segments shrink by it. Never
    /// given back (the handles live as long as the process). `false`, taking
    /// nothing, when the device has less free: the caching allocator does
    /// not release its cache for the driver, so `cublasCreate` fails
    /// (`CUBLAS_STATUS_ALLOC_FAILED`, seen on the H100 at a whole-card
    /// boundary: `fixtures/plan/wholecard_plan_h100.jsonl`).
    pub fn driver_alloc(&mut self, bytes: u64) -> bool {
        match self.used.checked_add(bytes) {
            Some(u) if u <= self.capacity => {
                self.used = u;
                true
            }
            _ => false,
        }
    }
    /// The driver gives back `bytes` it took with [`Self::driver_alloc`]
    /// for memory a program frees through it (`cudaFree` of a buffer
    /// allocated outside the caching allocator: AOTInductor's constant
    /// blob when its model goes).
    pub fn driver_free(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }
    /// A device that never runs out (for replays without a limit):
    /// [`UNLIMITED_BYTES`].
    pub fn unlimited() -> Self {
        Self::new(UNLIMITED_BYTES, UNLIMITED_BYTES)
    }
    /// Bytes in use: the allocator's segments and the driver's own
    /// allocations ([`Self::driver_alloc`]).
    pub fn used(&self) -> u64 {
        self.used
    }
    /// The next reservation of `size` bytes, below [`BEYOND_ADDR`].
    fn bump(&mut self, size: u64) -> Option<u64> {
        let a = self.next_addr;
        let end = a
            .checked_add(size)?
            .checked_next_multiple_of(RESERVE_ALIGN)?;
        if a < RESERVE_HIGH && end > RESERVE_LOW_END {
            self.next_addr = RESERVE_HIGH;
            return self.bump(size);
        }
        if end > BEYOND_ADDR {
            return None;
        }
        self.next_addr = end;
        Some(a)
    }
}

impl Device for SimDevice {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        if self.used.checked_add(size)? > self.capacity {
            return None;
        }
        let addr = match self.driver.malloc(size) {
            Some(a) => a,
            None => {
                let a = self.beyond;
                self.beyond = a.checked_add(size.checked_next_multiple_of(GRANULE)?)?;
                a
            }
        };
        self.used += size;
        self.live.insert(addr, size);
        Some(addr)
    }
    /// `cudaFree(addr)` frees the whole allocation `addr` begins, not `size`: the caching
    /// allocator's `release_block` of a split segment's first block (`release_available_cached_blocks`
    /// after `max_split_size_mb` was set at run time) names the block's size, while the driver
    /// takes back the segment, tail included. An address not live (freed already: undefined
    /// in PyTorch, whose `cudaFree` would fail) gives nothing back.
    fn free(&mut self, addr: u64, _size: u64) {
        if let Some(size) = self.live.remove(&addr) {
            self.driver.free(addr);
            self.used -= size;
        }
    }
    fn reserve(&mut self, size: u64) -> Option<u64> {
        self.bump(size)
    }
    fn map(&mut self, _addr: u64, size: u64) -> bool {
        match self.used.checked_add(size) {
            Some(u) if u <= self.capacity => {
                self.used = u;
                true
            }
            _ => false,
        }
    }
    fn unmap(&mut self, _addr: u64, size: u64) {
        self.used -= size;
    }
    fn mem_info(&self) -> (u64, u64) {
        (self.capacity - self.used, self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocatorConfig, CachingAllocator};

    /// Memory the driver takes outside the allocator leaves `cudaMemGetInfo`'s
    /// free figure and comes back when given back (AOTInductor's blob).
    #[test]
    fn driver_memory_given_back_is_free_again() {
        let mut d = SimDevice::new(1 << 30, 1 << 30);
        assert!(d.driver_alloc(10 << 20));
        assert_eq!(d.mem_info().0, (1 << 30) - (10 << 20));
        d.driver_free(10 << 20);
        assert_eq!(d.mem_info(), (1 << 30, 1 << 30));
    }

    /// `cudaFree` gives back the allocation a pointer begins, whatever size
    /// the caller names (a split segment's first block released alone), and
    /// nothing for a pointer freed already.
    #[test]
    fn cuda_free_gives_back_the_whole_allocation_once() {
        let mut d = SimDevice::new(1 << 30, 1 << 30);
        let a = d.malloc(400 << 20).unwrap();
        d.free(a, 300 << 20);
        assert_eq!(d.mem_info().0, 1 << 30);
        d.free(a, 100 << 20);
        assert_eq!(d.mem_info().0, 1 << 30);
    }

    /// Expandable segments' reservations lie below every `cudaMalloc`
    /// segment and apart from each other, however many there are: on an
    /// H100-sized device, ten reservations of 1 1/8 of its memory and
    /// segments filling the device, small ones among them (the context's
    /// chunk has a hole above the anchor that they take).
    #[test]
    fn reservations_never_overlap_segments_or_each_other() {
        let total = 85_017_493_504;
        let mut d = SimDevice::new(total, total);
        let mut segments = Vec::new();
        let mut reserved: Vec<(u64, u64)> = Vec::new();
        let size = total + total / 8;
        for _ in 0..10 {
            reserved.push((d.reserve(size).unwrap(), size));
            // 2 MiB segments go to the hole of the context's chunk, above
            // the anchor, while it has room
            for s in [2 << 20, 70 << 20].into_iter().cycle().take(200) {
                if let Some(a) = d.malloc(s) {
                    segments.push((a, s));
                }
            }
        }
        assert_eq!(segments.len(), 2000);
        let bottom = segments.iter().map(|(a, _)| *a).min().unwrap();
        for w in reserved.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?}");
        }
        let (last, size) = reserved[9];
        assert!(last + size <= bottom, "a segment starts at {bottom:#x}");
    }

    /// The H200's reservations in blind54/bb05 (expandable segments
    /// switched on at run time): the small pool's at `0x302000000`, the
    /// large pool's 2 MiB pages x 1 1/8 of the memory above it, on a
    /// 32 MiB boundary.
    #[test]
    fn reservations_start_where_the_gpus_do() {
        let total = 150_109_880_320;
        let conf = AllocatorConfig::parse("expandable_segments:True").unwrap();
        let mut a =
            CachingAllocator::with_device(conf, SimDevice::with_driver_placement(total, total));
        let small = a.malloc(512, 0).unwrap();
        let large = a.malloc(30 << 20, 0).unwrap();
        assert_eq!((small, large), (0x302000000, 0x2a54000000));
    }

    /// Driver address-space rule 16 (`validation/va_pinned` on the H200):
    /// a page-locked block takes address space where a segment of its size
    /// would go, using no device memory, so the next segment lies directly
    /// above it; unmapped, its range takes a segment again.
    #[test]
    fn a_pinned_block_lies_where_a_segment_would() {
        let total = 150_109_880_320;
        let (mut a, mut b) = (
            SimDevice::with_driver_placement(total, total),
            SimDevice::with_driver_placement(total, total),
        );
        for d in [&mut a, &mut b] {
            d.malloc(20 << 20).unwrap();
        }
        let block = a.pinned_map(32 << 20).unwrap();
        let segment = b.malloc(32 << 20).unwrap();
        assert_eq!(block, segment);
        assert_eq!(a.used(), 20 << 20);
        assert_eq!(a.malloc(24 << 20), b.malloc(24 << 20));
        a.host_unmap(block);
        b.free(segment, 32 << 20);
        assert_eq!(a.malloc(64 << 20), b.malloc(64 << 20));
    }

    /// On an unlimited device, reservations (1 1/8 of 64 PiB each) run out
    /// of address space after about a hundred and say so, never wrapping
    /// around: the allocator turns that into an out-of-memory error.
    #[test]
    fn reservations_run_out_without_wrapping() {
        let mut d = SimDevice::unlimited();
        let size = UNLIMITED_BYTES + UNLIMITED_BYTES / 8;
        let got: Vec<u64> = std::iter::from_fn(|| d.reserve(size)).take(1000).collect();
        assert!(got.len() > 100 && got.len() < 1000, "{}", got.len());
        assert!(got.windows(2).all(|w| w[0] + size <= w[1]));
        assert!(got.last().unwrap() + size <= BEYOND_ADDR);
        // one expandable segment per stream and pool: 16 streams, no panic
        let conf = AllocatorConfig::parse("expandable_segments:True").unwrap();
        let mut a = CachingAllocator::with_device(conf, SimDevice::unlimited());
        for stream in 0..16 {
            a.malloc(512, stream).unwrap();
            a.malloc(64 << 20, stream).unwrap();
        }
        assert_eq!(a.stats().num_device_alloc, 32);
    }
}
