//! Replay: drive the allocator twin with the `alloc` / `free_requested` /
//! `free_completed` sequence a real GPU recorded, and compare what the twin
//! does at the device level (`segment_alloc`, `segment_free`, `segment_map`,
//! `segment_unmap`, the addresses it hands out, out-of-memory errors) and the
//! final segments and blocks with what the real allocator did.
//!
//! Pure: the recording comes in as plain data ([`Recording`]), built from a
//! snapshot the snapshot crate has read ([`from_snapshot`]).

#![deny(missing_docs)]

mod device;
mod driver;
pub mod from_snapshot;

pub use device::ScriptedDevice;
pub use driver::{replay, Divergence, ReplayError, ReplayOptions, ReplayReport};

use vramscope_alloc::TraceAction;

/// One recorded trace entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub action: TraceAction,
    /// Address (for `oom`, the device's free bytes).
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Stream.
    pub stream: u64,
}

/// State of a block in a recorded segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// `active_allocated`.
    ActiveAllocated,
    /// `active_pending_free` (older: `active_awaiting_free`).
    ActivePendingFree,
    /// `inactive`.
    Inactive,
}

/// One block of a recorded segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedBlock {
    /// Address.
    pub address: u64,
    /// Size.
    pub size: u64,
    /// Requested size.
    pub requested_size: u64,
    /// State.
    pub state: BlockState,
}

/// One recorded segment (as `snapshot()` lists it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedSegment {
    /// Address.
    pub address: u64,
    /// Total size.
    pub total_size: u64,
    /// Stream.
    pub stream: u64,
    /// Large pool.
    pub is_large: bool,
    /// Expandable.
    pub is_expandable: bool,
    /// Blocks in address order.
    pub blocks: Vec<RecordedBlock>,
}

/// What one device recorded: its trace and its segments at the end.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// The trace, oldest first.
    pub trace: Vec<Event>,
    /// The segments when the snapshot was taken.
    pub segments: Vec<RecordedSegment>,
}
