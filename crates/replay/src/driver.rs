//! The replay loop and its comparison rules.

use std::fmt;

use vramscope_alloc::{
    AllocatorConfig, CachingAllocator, DeviceStats, EventPolicy, TraceAction, TraceEntry,
};

use crate::device::ScriptedDevice;
use crate::{BlockState, Event, RecordedSegment, Recording};

/// How to set up the twin for a replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The allocator settings the recording ran with.
    pub config: AllocatorConfig,
    /// `torch.cuda.set_per_process_memory_fraction`, if the run set one.
    pub memory_fraction: Option<f64>,
    /// The GPU's total memory (`cudaMemGetInfo`), which sizes expandable
    /// segments' address space and the memory fraction.
    pub total_memory: u64,
    /// Bytes `cudaMalloc` could hand out, when the run was limited by the
    /// device itself rather than by a fraction; `None` = unlimited.
    pub device_capacity: Option<u64>,
}

/// The first place the twin and the GPU disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the trace entry at which it shows (the trace length for the
    /// final state).
    pub trace_index: usize,
    /// What the GPU did.
    pub expected: String,
    /// What the twin did.
    pub got: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at trace entry {}: expected {}, got {}",
            self.trace_index, self.expected, self.got
        )
    }
}

/// Why a recording cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// The trace does not start at the first allocation (recording began
    /// late, or the ring buffer dropped its start).
    NotFromStart {
        /// The first entry that refers to memory the trace never allocated.
        trace_index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The trace is empty.
    EmptyTrace,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::NotFromStart {
                trace_index,
                reason,
            } => write!(
                f,
                "the trace does not start at the first allocation (entry {trace_index}: {reason}); \
                 record with torch.cuda.memory._record_memory_history() before any CUDA allocation \
                 and a max_entries large enough for the whole run"
            ),
            ReplayError::EmptyTrace => {
                write!(f, "the snapshot's trace is empty: nothing to replay")
            }
        }
    }
}

impl std::error::Error for ReplayError {}

/// What a replay found.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// Trace entries replayed.
    pub trace_entries: usize,
    /// Segment actions of the recording the twin reproduced, in order.
    pub segment_events_matched: usize,
    /// Segment actions in the recording.
    pub segment_events_total: usize,
    /// The first disagreement; `None` when the replay is exact.
    pub first_divergence: Option<Divergence>,
    /// The twin's statistics at the end (peaks included).
    pub stats: DeviceStats,
    /// Times the replay inferred an `empty_cache()` call from the trace.
    pub inferred_empty_cache: usize,
}

impl ReplayReport {
    /// The replay matched the recording exactly.
    pub fn is_exact(&self) -> bool {
        self.first_divergence.is_none()
    }
}

fn describe(e: &Event) -> String {
    format!(
        "{} of {} bytes at {:#x} on stream {:#x}",
        e.action.as_str(),
        e.size,
        e.addr,
        e.stream
    )
}

fn describe_t(e: &TraceEntry) -> String {
    format!(
        "{} of {} bytes at {:#x} on stream {:#x}",
        e.action.as_str(),
        e.size,
        e.addr,
        e.stream
    )
}

/// Stream the replay uses to mark a block freed while in use elsewhere.
const SIDE_STREAM: u64 = u64::MAX;

/// Check the trace starts at the first allocation: every free refers to an
/// allocation it made, and every allocation lies inside a segment it made.
fn check_from_start(trace: &[Event]) -> Result<(), ReplayError> {
    use std::collections::{BTreeMap, HashSet};
    let mut segs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut live: HashSet<u64> = HashSet::new();
    for (i, e) in trace.iter().enumerate() {
        // Mapped ranges may overlap after unmap/remap: any one holding `a` will do.
        let inside =
            |segs: &BTreeMap<u64, u64>, a: u64| segs.range(..=a).rev().any(|(s, n)| a < s + n);
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                let n = segs.entry(e.addr).or_insert(0);
                *n = (*n).max(e.size);
            }
            TraceAction::SegmentFree if !inside(&segs, e.addr) => {
                return Err(ReplayError::NotFromStart {
                    trace_index: i,
                    reason: format!(
                        "segment_free of {:#x}, a segment the trace never allocated",
                        e.addr
                    ),
                });
            }
            TraceAction::Alloc if !inside(&segs, e.addr) => {
                return Err(ReplayError::NotFromStart {
                    trace_index: i,
                    reason: format!(
                        "alloc at {:#x}, outside every segment the trace allocated",
                        e.addr
                    ),
                });
            }
            TraceAction::Alloc => {
                live.insert(e.addr);
            }
            TraceAction::FreeRequested if !live.remove(&e.addr) => {
                return Err(ReplayError::NotFromStart {
                    trace_index: i,
                    reason: format!(
                        "free_requested of {:#x}, never allocated in the trace",
                        e.addr
                    ),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

struct Run {
    twin: CachingAllocator<ScriptedDevice>,
    seg_events: Vec<(usize, Event)>,
    /// Twin trace entries consumed so far.
    seen: usize,
    /// Segment events the twin reproduced.
    matched: usize,
}

impl Run {
    /// Compare the twin's new trace entries with the recording; the alloc
    /// address is compared by the caller.
    fn check_new(&mut self, index: usize) -> Result<Option<u64>, Divergence> {
        let new: Vec<TraceEntry> = self.twin.trace()[self.seen..].to_vec();
        self.seen += new.len();
        let mut alloc_addr = None;
        for t in new {
            if t.action.is_segment() {
                let Some((ri, r)) = self.seg_events.get(self.matched).copied() else {
                    return Err(Divergence {
                        trace_index: index,
                        expected: "no further segment action".into(),
                        got: describe_t(&t),
                    });
                };
                if r.action != t.action || r.size != t.size || r.addr != t.addr {
                    return Err(Divergence {
                        trace_index: ri.min(index),
                        expected: describe(&r),
                        got: describe_t(&t),
                    });
                }
                self.matched += 1;
            } else if t.action == TraceAction::Alloc {
                alloc_addr = Some(t.addr);
            }
        }
        Ok(alloc_addr)
    }

    /// Segment events of the recording before trace index `i`.
    fn expected_before(&self, i: usize) -> usize {
        self.seg_events.partition_point(|(ri, _)| *ri < i)
    }

    fn lag(&self, index: usize) -> Option<Divergence> {
        let want = self.expected_before(index);
        (self.matched < want).then(|| {
            let (ri, r) = self.seg_events[self.matched];
            Divergence {
                trace_index: ri,
                expected: describe(&r),
                got: "nothing (the twin did not do this)".into(),
            }
        })
    }

    fn next_unmatched_is_release(&self, index: usize) -> bool {
        self.matched < self.expected_before(index)
            && matches!(
                self.seg_events[self.matched].1.action,
                TraceAction::SegmentFree | TraceAction::SegmentUnmap
            )
    }
}

/// Replay `rec` through a twin set up by `opts`.
pub fn replay(rec: &Recording, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let trace = &rec.trace;
    if trace.is_empty() {
        return Err(ReplayError::EmptyTrace);
    }
    check_from_start(trace)?;
    let seg_events: Vec<(usize, Event)> = trace
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action.is_segment())
        .map(|(i, e)| (i, *e))
        .collect();
    let device = ScriptedDevice::new(
        seg_events.iter().map(|(_, e)| *e).collect(),
        opts.total_memory,
        opts.device_capacity
            .unwrap_or(vramscope_alloc::UNLIMITED_BYTES),
    );
    let mut twin = CachingAllocator::with_device(opts.config.clone(), device);
    twin.record_history(true);
    twin.set_event_policy(EventPolicy::Manual);
    if let Some(f) = opts.memory_fraction {
        twin.set_memory_fraction(f);
    }
    let mut run = Run {
        twin,
        seg_events,
        seen: 0,
        matched: 0,
    };
    let mut inferred_empty_cache = 0;
    let mut deferred = std::collections::HashSet::new();
    let mut divergence = None;

    'entries: for (i, e) in trace.iter().enumerate() {
        match e.action {
            TraceAction::Alloc | TraceAction::Oom => {
                // Unexplained releases before a malloc: either the malloc's own
                // retry path, or an empty_cache() the program called. Try the
                // first; fall back to the second.
                let backup = run
                    .next_unmatched_is_release(i)
                    .then(|| (run.twin.clone(), run.seen, run.matched));
                let attempt = |run: &mut Run| -> Result<(), Divergence> {
                    let got = run.twin.malloc(e.size, e.stream);
                    if let (TraceAction::Alloc, Err(oom)) = (e.action, &got) {
                        return Err(Divergence {
                            trace_index: i,
                            expected: describe(e),
                            got: format!("out of memory: {oom}"),
                        });
                    }
                    let addr = run.check_new(i)?;
                    if let Some(d) = run.lag(i) {
                        return Err(d);
                    }
                    match (e.action, got, addr) {
                        (TraceAction::Alloc, Ok(a), Some(_)) if a == e.addr => Ok(()),
                        (TraceAction::Alloc, Ok(a), _) => Err(Divergence {
                            trace_index: i,
                            expected: describe(e),
                            got: format!("alloc at {a:#x}"),
                        }),
                        (_, Err(_), _) => Ok(()),
                        (_, Ok(a), _) => Err(Divergence {
                            trace_index: i,
                            expected: "out of memory".into(),
                            got: format!("alloc at {a:#x}"),
                        }),
                    }
                };
                if let Err(first) = attempt(&mut run) {
                    let Some((twin, seen, matched)) = backup else {
                        divergence = Some(first);
                        break 'entries;
                    };
                    run.twin = twin;
                    run.seen = seen;
                    run.matched = matched;
                    run.twin.empty_cache();
                    inferred_empty_cache += 1;
                    if let Err(d) = run.check_new(i).and_then(|_| attempt(&mut run)) {
                        divergence = Some(first.min_by_index(d));
                        break 'entries;
                    }
                }
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted => {
                if run.next_unmatched_is_release(i) {
                    run.twin.empty_cache();
                    inferred_empty_cache += 1;
                    if let Err(d) = run.check_new(i) {
                        divergence = Some(d);
                        break;
                    }
                }
                if let Some(d) = run.lag(i) {
                    divergence = Some(d);
                    break;
                }
                if e.action == TraceAction::FreeRequested {
                    let immediate = trace.get(i + 1).is_some_and(|n| {
                        n.action == TraceAction::FreeCompleted && n.addr == e.addr
                    });
                    if !immediate {
                        // Used on another stream: the free completes later.
                        let _ = run.twin.record_stream(e.addr, SIDE_STREAM);
                        deferred.insert(e.addr);
                    }
                    if run.twin.free(e.addr).is_err() {
                        divergence = Some(Divergence {
                            trace_index: i,
                            expected: describe(e),
                            got: "no allocation at that address".into(),
                        });
                        break;
                    }
                } else if deferred.remove(&e.addr) {
                    run.twin.complete_events(e.addr);
                }
                if let Err(d) = run.check_new(i) {
                    divergence = Some(d);
                    break;
                }
            }
            _ => {}
        }
    }
    if divergence.is_none() {
        // Trailing releases: an empty_cache() at the end.
        if run.next_unmatched_is_release(trace.len()) {
            run.twin.empty_cache();
            inferred_empty_cache += 1;
            if let Err(d) = run.check_new(trace.len()) {
                divergence = Some(d);
            }
        }
        if divergence.is_none() {
            divergence = run
                .lag(trace.len())
                .or_else(|| compare_segments(&run.twin, &rec.segments, trace.len()));
        }
    }
    Ok(ReplayReport {
        trace_entries: trace.len(),
        segment_events_matched: run.matched,
        segment_events_total: run.seg_events.len(),
        first_divergence: divergence,
        stats: run.twin.stats().clone(),
        inferred_empty_cache,
    })
}

trait MinByIndex {
    fn min_by_index(self, other: Self) -> Self;
}
impl MinByIndex for Divergence {
    /// Of two explanations that failed, report the one that got further.
    fn min_by_index(self, other: Self) -> Self {
        if other.trace_index > self.trace_index {
            other
        } else {
            self
        }
    }
}

/// Compare the twin's segments and blocks with the recorded ones.
fn compare_segments<D: vramscope_alloc::Device>(
    twin: &CachingAllocator<D>,
    real: &[RecordedSegment],
    index: usize,
) -> Option<Divergence> {
    let mine = twin.snapshot();
    let mut real: Vec<&RecordedSegment> = real.iter().collect();
    real.sort_by_key(|s| s.address);
    let div = |expected: String, got: String| {
        Some(Divergence {
            trace_index: index,
            expected,
            got,
        })
    };
    for (k, r) in real.iter().enumerate() {
        let Some(m) = mine.get(k) else {
            return div(
                format!("segment at {:#x} of {} bytes", r.address, r.total_size),
                "no such segment".into(),
            );
        };
        if (
            m.address,
            m.total_size,
            m.is_large,
            m.is_expandable,
            m.stream,
        ) != (
            r.address,
            r.total_size,
            r.is_large,
            r.is_expandable,
            r.stream,
        ) {
            return div(
                format!(
                    "segment at {:#x} of {} bytes (large {}, expandable {}, stream {:#x})",
                    r.address, r.total_size, r.is_large, r.is_expandable, r.stream
                ),
                format!(
                    "segment at {:#x} of {} bytes (large {}, expandable {}, stream {:#x})",
                    m.address, m.total_size, m.is_large, m.is_expandable, m.stream
                ),
            );
        }
        if m.blocks.len() != r.blocks.len() {
            return div(
                format!(
                    "{} blocks in the segment at {:#x}",
                    r.blocks.len(),
                    r.address
                ),
                format!("{} blocks", m.blocks.len()),
            );
        }
        for (mb, rb) in m.blocks.iter().zip(&r.blocks) {
            let state = if mb.allocated {
                BlockState::ActiveAllocated
            } else if mb.active {
                BlockState::ActivePendingFree
            } else {
                BlockState::Inactive
            };
            if (mb.address, mb.size, state, mb.requested_size)
                != (rb.address, rb.size, rb.state, rb.requested_size)
            {
                return div(
                    format!(
                        "block at {:#x} of {} bytes, {:?}, requested {}",
                        rb.address, rb.size, rb.state, rb.requested_size
                    ),
                    format!(
                        "block at {:#x} of {} bytes, {:?}, requested {}",
                        mb.address, mb.size, state, mb.requested_size
                    ),
                );
            }
        }
    }
    if mine.len() > real.len() {
        let m = &mine[real.len()];
        return div(
            "no further segment".into(),
            format!("segment at {:#x} of {} bytes", m.address, m.total_size),
        );
    }
    None
}
