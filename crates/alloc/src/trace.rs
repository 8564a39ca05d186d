//! The trace actions PyTorch records (`TraceEntry::Action`).

/// What happened (`TraceEntry::Action`), spelled as in snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// `alloc`: a block handed to the program.
    Alloc,
    /// `free_requested`: the program freed it.
    FreeRequested,
    /// `free_completed`: the block is back in the pool.
    FreeCompleted,
    /// `segment_alloc`: `cudaMalloc`.
    SegmentAlloc,
    /// `segment_free`: `cudaFree`.
    SegmentFree,
    /// `segment_map`: pages mapped into an expandable segment.
    SegmentMap,
    /// `segment_unmap`: pages unmapped from an expandable segment.
    SegmentUnmap,
    /// `oom`: out of memory raised (addr holds the device's free bytes).
    Oom,
    /// `snapshot`: a snapshot was taken.
    Snapshot,
}

impl TraceAction {
    /// The snapshot spelling (`alloc`, `segment_map`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
        }
    }
    /// Parse the snapshot spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "alloc" => TraceAction::Alloc,
            "free_requested" => TraceAction::FreeRequested,
            "free_completed" => TraceAction::FreeCompleted,
            "segment_alloc" => TraceAction::SegmentAlloc,
            "segment_free" => TraceAction::SegmentFree,
            "segment_map" => TraceAction::SegmentMap,
            "segment_unmap" => TraceAction::SegmentUnmap,
            "oom" => TraceAction::Oom,
            "snapshot" => TraceAction::Snapshot,
            _ => return None,
        })
    }
    /// A device-level (segment) action.
    pub fn is_segment(self) -> bool {
        matches!(
            self,
            TraceAction::SegmentAlloc
                | TraceAction::SegmentFree
                | TraceAction::SegmentMap
                | TraceAction::SegmentUnmap
        )
    }
}

/// One trace entry: action, address, size and stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Address (for `oom`: the device's free bytes).
    pub addr: u64,
    /// Bytes (requested size for alloc/free, segment size for segments).
    pub size: u64,
    /// The stream.
    pub stream: u64,
}
