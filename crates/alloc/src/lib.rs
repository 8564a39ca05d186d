//! The allocator twin: PyTorch's native CUDA caching allocator
//! (`c10/cuda/CUDACachingAllocator.cpp` and `c10/core/AllocatorConfig.cpp`,
//! PyTorch 2.11) reproduced rule for rule as a pure state machine over
//! simulated device addresses.
//!
//! It owns: size rounding, the small and large pools, segment sizing,
//! best-fit search by stream, block splitting and merging, expandable
//! segments, `empty_cache`, the memory fraction, the out-of-memory retry
//! path, garbage collection, `memory_stats()`, `snapshot()` and the trace
//! PyTorch records; and, from recorded best fits, when a stretch of
//! requests would repeat itself ([`fits`]). It does no I/O; the device
//! underneath is a trait ([`Device`]) so the same rules run on a simulated
//! GPU or follow a trace.

#![deny(missing_docs)]

mod addrmap;
mod allocator;
mod config;
mod device;
mod driver_va;
mod error;
pub mod fits;
mod format;
mod freeset;
mod host;
pub mod inthash;
mod largepool;
mod malloc_async;
mod skaset;
mod smallpool;
mod stats;
mod summary;
mod trace;

pub use allocator::{
    get_allocation_size, roundup_power2_next_division, BlockInfo, CachingAllocator, EventPolicy,
    FreeBlocks, Handle, Moment, SegmentInfo, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE,
    SMALL_BUFFER, SMALL_SIZE,
};
pub use config::{
    AllocatorConfig, ConfigError, ConfigErrorKind, Shortcut, LARGE_BUFFER, MIB, ROUNDUP_INTERVALS,
};
pub use device::{Device, SimDevice, UNLIMITED_BYTES};
pub use error::{AllocError, OutOfMemory};
pub use fits::{BlockKey, Fit};
pub use format::{format_size, parse_size};
pub use host::{HostHeap, FROM_CONFIG_THRESHOLD};
pub use largepool::{LargeBlock, LargePool};
pub use malloc_async::AsyncOom;
pub use smallpool::{FreeBlock, SmallPool};
pub use stats::{DeviceStats, Stat, StatArray, StatType};
pub use summary::memory_summary;
pub use trace::{TraceAction, TraceEntry};

/// A simulated device address.
pub type Addr = u64;
/// A CUDA stream as PyTorch records it (`cudaStream_t` value; 0 is the
/// default stream).
pub type StreamId = u64;

/// The device memory the device's stream pools hold beyond the allocator
/// (`cudaMemGetInfo`'s used memory less `memory_reserved()`), from the first
/// side stream on, or under `backend:cudaMallocAsync` from whichever of that
/// and the first allocation comes first: 70 MiB (73,400,320 bytes) on the
/// H100 (fixtures/run/probes/mx2_stream_pool_probe_s61_h100.txt; CUDAStream.cpp
/// `initDeviceStreamState`; `priority_range()` takes none). The H200's is
/// taken to be the same (unmeasured).
pub const STREAM_POOLS_BYTES: u64 = 70 << 20;
