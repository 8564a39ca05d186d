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
/// By default `cudaMalloc` returns increasing addresses.
/// [`SimDevice::with_driver_placement`] places segments by the CUDA driver's
/// own rule instead (`driver_va.rs`: 32 MiB chunks top-down, holes of the
/// newest chunk first), which the kernel-free GPU traces follow exactly; it
/// is not the default because in workloads that launch kernels the driver's
/// own allocations (cuBLAS, kernels' local memory), which the allocator
/// does not see, move the segments elsewhere.
#[derive(Debug, Clone)]
pub struct SimDevice {
    total: u64,
    capacity: u64,
    used: u64,
    next_addr: u64,
    /// `Some`: `cudaMalloc` addresses come from the driver rule.
    driver: Option<DriverVa>,
}

/// Physical allocation granularity of the CUDA driver: 2 MiB.
const GRANULE: u64 = 2 * 1024 * 1024;
/// Where simulated device addresses start (a typical CUDA VA on Linux).
const BASE_ADDR: u64 = 0x7f00_0000_0000;
/// The end of the CUDA context's range for [`SimDevice::with_driver_placement`]
/// (its segments grow down from here; 64 MiB aligned like the traces' anchors).
const DRIVER_ANCHOR: u64 = 0x7f80_0000_0000;

impl SimDevice {
    /// A device with `capacity` allocatable bytes out of `total`.
    pub fn new(total: u64, capacity: u64) -> Self {
        Self {
            total,
            capacity: capacity.min(total),
            used: 0,
            next_addr: BASE_ADDR,
            driver: None,
        }
    }
    /// A device whose `cudaMalloc` places segments as the CUDA driver does
    /// in a fresh process (see `driver_va.rs` for the rules and the traces
    /// they come from); `cuMemAddressReserve` still counts up from its own
    /// base, as the driver's reservations for expandable segments lie apart.
    pub fn with_driver_placement(total: u64, capacity: u64) -> Self {
        Self {
            driver: Some(DriverVa::new(DRIVER_ANCHOR)),
            ..Self::new(total, capacity)
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
        let addr = match &mut self.driver {
            Some(va) => va.malloc(size)?,
            None => self.bump(size),
        };
        self.used += size;
        Some(addr)
    }
    fn free(&mut self, addr: u64, size: u64) {
        if let Some(va) = &mut self.driver {
            va.free(addr);
        }
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
