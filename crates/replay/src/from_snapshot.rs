//! From a read snapshot to a [`Recording`] and the allocator settings it ran with.

use vramscope_alloc::{AllocatorConfig, TraceAction, ROUNDUP_INTERVALS};
use vramscope_snapshot::model::{
    BlockState as SnapState, RoundupPower2Divisions, SegmentType, Snapshot,
};

use crate::{BlockState, Event, RecordedBlock, RecordedSegment, Recording};

/// The devices a snapshot has traces for.
pub fn devices(snap: &Snapshot) -> Vec<usize> {
    (0..snap.device_traces.len())
        .filter(|&d| !snap.device_traces[d].is_empty())
        .collect()
}

/// The recording of one device: its trace and its segments.
pub fn recording(snap: &Snapshot, device: usize) -> Recording {
    let trace = snap
        .device_traces
        .get(device)
        .map(|t| {
            t.iter()
                .filter_map(|e| {
                    // `snapshot` markers and unknown actions change nothing.
                    let action = e.action.filter(|a| *a != TraceAction::Snapshot)?;
                    Some(Event {
                        action,
                        addr: e.addr,
                        size: e.size,
                        stream: e.stream,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let segments = snap
        .segments
        .iter()
        .filter(|s| s.device == device as i64 && s.segment_pool_id == (0, 0))
        .map(|s| {
            let mut addr = s.address;
            let blocks = s
                .blocks
                .iter()
                .map(|b| {
                    let address = b.address.unwrap_or(addr);
                    addr = address + b.size;
                    RecordedBlock {
                        address,
                        size: b.size,
                        requested_size: b.requested_size,
                        state: match b.state {
                            SnapState::ActiveAllocated => BlockState::ActiveAllocated,
                            SnapState::Inactive => BlockState::Inactive,
                            _ => BlockState::ActivePendingFree,
                        },
                    }
                })
                .collect();
            RecordedSegment {
                address: s.address,
                total_size: s.total_size,
                stream: s.stream,
                is_large: s.segment_type != SegmentType::Small,
                is_expandable: s.is_expandable,
                blocks,
            }
        })
        .collect();
    Recording { trace, segments }
}

/// The allocator settings of the run: the settings string parsed as PyTorch
/// parses it, then every typed field the snapshot recorded laid over it (the
/// recorded values are what the allocator actually used). Returns the
/// config and, when the string did not parse, why.
pub fn config(snap: &Snapshot) -> (AllocatorConfig, Option<String>) {
    let Some(s) = &snap.allocator_settings else {
        return (AllocatorConfig::default(), None);
    };
    let conf = s.pytorch_cuda_alloc_conf.clone().unwrap_or_default();
    let (mut cfg, warning) = match AllocatorConfig::parse(&conf) {
        Ok(c) => (c, None),
        Err(e) => (AllocatorConfig::default(), Some(e.to_string())),
    };
    if let Some(m) = s.max_split_size {
        cfg.max_split_size = if m < 0 { u64::MAX } else { m as u64 };
    }
    if let Some(g) = s.garbage_collection_threshold {
        cfg.garbage_collection_threshold = g;
    }
    if let Some(e) = s.expandable_segments {
        cfg.expandable_segments = e;
    }
    match &s.roundup_power2_divisions {
        Some(RoundupPower2Divisions::PerBucket(v)) => {
            for &(bucket, div) in v {
                // Bucket keys are the interval starts in MiB: 1, 2, 4, ... 32768.
                let i = 63 - bucket.max(1).leading_zeros() as usize;
                if i < ROUNDUP_INTERVALS {
                    cfg.roundup_power2_divisions[i] = div;
                }
            }
        }
        Some(RoundupPower2Divisions::Uniform(d)) => {
            cfg.roundup_power2_divisions = [*d; ROUNDUP_INTERVALS]
        }
        _ => {}
    }
    (cfg, warning)
}
