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
    /// `cuMemAddressReserve(size)`: a virtual range for an expandable segment.
    fn reserve(&mut self, size: u64) -> u64;
    /// `cuMemCreate` + `cuMemMap` of `size` bytes of physical pages at `addr`;
    /// `false` when the device has no memory left.
    fn map(&mut self, addr: u64, size: u64) -> bool;
    /// `cuMemUnmap` + `cuMemRelease`.
    fn unmap(&mut self, addr: u64, size: u64);
    /// `cudaMemGetInfo`: (free, total) bytes.
    fn mem_info(&self) -> (u64, u64);
}

use crate::driver_va::DriverVa;

/// A simulated GPU: `total` bytes as `cudaMemGetInfo` reports them, of which
/// `capacity` can be allocated (the rest is the CUDA context and driver).
///
/// `cudaMalloc` places segments by the CUDA driver's rule (`driver_va.rs`:
/// 32 MiB chunks top-down, holes of the newest chunk first), from the state
/// a process is in once its first cuBLAS call has run (rule 5 there): the
/// allocator breaks ties between equal-size free blocks by address, so where
/// segments lie changes which blocks get reused. [`SimDevice::new`] starts
/// there; [`SimDevice::with_driver_placement`] starts from a fresh context
/// instead, as a process that launches no kernels does. The driver's own
/// allocations in a process that launches kernels (kernel modules, the
/// autograd thread's cuBLAS handle) are not seen by the allocator and not
/// simulated.
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
}

/// Physical allocation granularity of the CUDA driver: 2 MiB.
const GRANULE: u64 = 2 * 1024 * 1024;
/// Where `cuMemAddressReserve` ranges start (a typical CUDA VA on Linux).
const BASE_ADDR: u64 = 0x7f00_0000_0000;
/// The end of the CUDA context's range (its segments grow down from here;
/// 64 MiB aligned like the traces' anchors).
const DRIVER_ANCHOR: u64 = 0x7f80_0000_0000;
/// Above every address the driver rule hands out.
const BEYOND_ADDR: u64 = 1 << 63;

impl SimDevice {
    /// A device with `capacity` allocatable bytes out of `total`, as in a
    /// process that has run its first cuBLAS call (see the type's doc).
    pub fn new(total: u64, capacity: u64) -> Self {
        Self::with(total, capacity, DriverVa::after_cublas(DRIVER_ANCHOR))
    }
    /// A device whose `cudaMalloc` places segments as the CUDA driver does
    /// in a fresh process that launches no kernels (see `driver_va.rs` for
    /// the rules and the traces they come from); `cuMemAddressReserve`
    /// still counts up from its own base, as the driver's reservations for
    /// expandable segments lie apart.
    pub fn with_driver_placement(total: u64, capacity: u64) -> Self {
        Self::with(total, capacity, DriverVa::new(DRIVER_ANCHOR))
    }
    fn with(total: u64, capacity: u64, driver: DriverVa) -> Self {
        Self {
            total,
            capacity: capacity.min(total),
            used: 0,
            next_addr: BASE_ADDR,
            driver,
            beyond: BEYOND_ADDR,
        }
    }
    /// A device that never runs out (for replays without a limit).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX / 4, u64::MAX / 4)
    }
    /// Bytes in use by the allocator's segments.
    pub fn used(&self) -> u64 {
        self.used
    }
    fn bump(&mut self, size: u64) -> u64 {
        let a = self.next_addr;
        self.next_addr += size.div_ceil(GRANULE) * GRANULE;
        a
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
        Some(addr)
    }
    fn free(&mut self, addr: u64, size: u64) {
        self.driver.free(addr);
        self.used -= size;
    }
    fn reserve(&mut self, size: u64) -> u64 {
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
