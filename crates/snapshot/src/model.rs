//! The typed snapshot model.
//!
//! Field names follow PyTorch's `torch/csrc/cuda/memory_snapshot.cpp` and
//! `c10/cuda/CUDACachingAllocator.h`. Stack traces are stored once: every
//! `frames` field is a [`StackId`] into the snapshot's [`StackTable`], which
//! holds each distinct frame and each distinct stack a single time (a big
//! trace repeats the same few thousand stacks millions of times). Resolve
//! them with [`Snapshot::frames`].

use std::collections::HashMap;

use crate::hash::{hash_words, IdBuild};
use crate::intern::Interner;
use crate::pickle::Value;
use crate::trace::{Trace, TraceEntry};
use vramscope_alloc::{AllocatorConfig, ROUNDUP_INTERVALS};

/// An interned string in a [`StackTable`]; resolve with [`Snapshot::str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// A distinct frame in a [`StackTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// A distinct stack (list of frames, innermost first) in a [`StackTable`].
/// `StackId::EMPTY` is the empty stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

impl StackId {
    /// The empty stack (no frames recorded).
    pub const EMPTY: StackId = StackId(0);
}

impl Default for StackId {
    fn default() -> Self {
        StackId::EMPTY
    }
}

/// One stack frame, borrowed from the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame<'a> {
    /// Function name (`"forward"`, `"at::native::empty_cuda(...)"`).
    pub name: &'a str,
    /// File (`".../torch/nn/modules/linear.py"`, `"??"` for unknown C++).
    pub filename: &'a str,
    /// Line number (0 for C++ frames; -1 for a line PyTorch did not know,
    /// which it writes as 2**64-1: see `convert::line_of`).
    pub line: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FrameRec {
    name: u32,
    filename: u32,
    line: i64,
}

const NIL: u32 = u32::MAX;

/// Interned strings, frames and stacks shared by a whole snapshot.
#[derive(Clone, Debug)]
pub struct StackTable {
    pub(crate) strings: Interner,
    frames: Vec<FrameRec>,
    frame_map: HashMap<FrameRec, u32>,
    pool: Vec<FrameId>,
    /// (start, len) in `pool`.
    stacks: Vec<(u32, u32)>,
    stack_map: HashMap<u64, u32, IdBuild>,
    stack_prev: Vec<u32>,
}

impl Default for StackTable {
    fn default() -> Self {
        Self::new()
    }
}

impl StackTable {
    /// An empty table (holding only [`StackId::EMPTY`]).
    pub fn new() -> Self {
        Self::with_strings(Interner::default())
    }

    pub(crate) fn with_strings(strings: Interner) -> Self {
        let mut t = StackTable {
            strings,
            frames: Vec::new(),
            frame_map: HashMap::new(),
            pool: Vec::new(),
            stacks: Vec::new(),
            stack_map: HashMap::default(),
            stack_prev: Vec::new(),
        };
        t.intern_stack(&[]);
        t
    }

    /// Intern a string.
    pub fn intern_str(&mut self, s: &str) -> Sym {
        Sym(self.strings.intern(s).unwrap_or(0))
    }

    /// The string for `s` (`""` for a symbol from another table).
    pub fn str(&self, s: Sym) -> &str {
        self.strings.get(s.0)
    }

    /// Intern a frame.
    pub fn intern_frame(&mut self, name: &str, filename: &str, line: i64) -> FrameId {
        let rec = FrameRec {
            name: self.intern_str(name).0,
            filename: self.intern_str(filename).0,
            line,
        };
        self.intern_frame_rec(rec)
    }

    pub(crate) fn intern_frame_syms(&mut self, name: Sym, filename: Sym, line: i64) -> FrameId {
        self.intern_frame_rec(FrameRec {
            name: name.0,
            filename: filename.0,
            line,
        })
    }

    fn intern_frame_rec(&mut self, rec: FrameRec) -> FrameId {
        if let Some(&id) = self.frame_map.get(&rec) {
            return FrameId(id);
        }
        let id = u32::try_from(self.frames.len()).unwrap_or(NIL);
        self.frames.push(rec);
        self.frame_map.insert(rec, id);
        FrameId(id)
    }

    /// Intern a stack (innermost frame first, as PyTorch stores them).
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        let h = hash_words(0x5354_4143_4b00, frames.iter().map(|f| u64::from(f.0)));
        let head = self.stack_map.get(&h).copied().unwrap_or(NIL);
        let mut p = head;
        while p != NIL {
            if self.stack_frame_ids(StackId(p)) == frames {
                return StackId(p);
            }
            p = self.stack_prev[p as usize];
        }
        let start = u32::try_from(self.pool.len()).unwrap_or(NIL);
        self.pool.extend_from_slice(frames);
        let id = u32::try_from(self.stacks.len()).unwrap_or(NIL);
        self.stacks.push((start, frames.len() as u32));
        self.stack_prev.push(head);
        self.stack_map.insert(h, id);
        StackId(id)
    }

    /// The frame for `id` (an empty frame for an id from another table).
    pub fn frame(&self, id: FrameId) -> Frame<'_> {
        match self.frames.get(id.0 as usize) {
            Some(r) => Frame {
                name: self.strings.get(r.name),
                filename: self.strings.get(r.filename),
                line: r.line,
            },
            None => Frame {
                name: "",
                filename: "",
                line: 0,
            },
        }
    }

    /// The frame ids of a stack (empty for an id from another table).
    pub fn stack_frame_ids(&self, id: StackId) -> &[FrameId] {
        let Some(&(s, n)) = self.stacks.get(id.0 as usize) else {
            return &[];
        };
        self.pool
            .get(s as usize..s as usize + n as usize)
            .unwrap_or(&[])
    }

    /// The frames of a stack, innermost first.
    pub fn frames(&self, id: StackId) -> Frames<'_> {
        Frames {
            table: self,
            ids: self.stack_frame_ids(id).iter(),
        }
    }

    /// Whether some frame is one `vramscope estimate --snapshot` makes up
    /// (`vramscope::category::NAME`): the snapshot was predicted by the
    /// twin, not recorded on a GPU.
    pub fn written_by_vramscope(&self) -> bool {
        self.frames.iter().any(|r| {
            self.strings
                .get(r.name)
                .starts_with("vramscope::category::")
        })
    }

    /// Number of interned strings (their [`Sym`]s are `0..num_strs()`).
    pub fn num_strs(&self) -> usize {
        self.strings.len()
    }

    /// Number of distinct frames.
    pub fn num_frames(&self) -> usize {
        self.frames.len()
    }

    /// Number of distinct stacks (including the empty one).
    pub fn num_stacks(&self) -> usize {
        self.stacks.len()
    }
}

/// Iterator over a stack's frames.
#[derive(Clone)]
pub struct Frames<'a> {
    table: &'a StackTable,
    ids: std::slice::Iter<'a, FrameId>,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Frame<'a>;
    fn next(&mut self) -> Option<Frame<'a>> {
        self.ids.next().map(|&id| self.table.frame(id))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ids.size_hint()
    }
}

impl ExactSizeIterator for Frames<'_> {}

/// A whole `torch.cuda.memory._snapshot()` / `_dump_snapshot` pickle.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Allocator segments (`cudaMalloc`ed ranges) alive at snapshot time.
    pub segments: Vec<Segment>,
    /// Per device, the recorded allocator events, oldest first.
    pub device_traces: Vec<Trace>,
    /// The allocator configuration (PyTorch 2.1+).
    pub allocator_settings: Option<AllocatorSettings>,
    /// `external_annotations` (record_function-style START/END markers).
    pub external_annotations: Vec<Annotation>,
    /// `host_segments`, kept raw (pinned host memory, newer PyTorch).
    pub host_segments: Option<Value>,
    /// `host_traces`, kept raw (pinned host memory, newer PyTorch).
    pub host_traces: Option<Value>,
    /// Any other top-level keys, raw.
    pub other: Vec<(String, Value)>,
    /// The strings, frames and stacks every `frames` field points into.
    pub stacks: StackTable,
}

impl Snapshot {
    /// The frames of a stack, innermost first.
    pub fn frames(&self, id: StackId) -> Frames<'_> {
        self.stacks.frames(id)
    }

    /// The string of an interned symbol.
    pub fn str(&self, s: Sym) -> &str {
        self.stacks.str(s)
    }

    /// The wire name of an entry's action (`"alloc"`, ..., or the
    /// verbatim string of an action PyTorch 2.11 does not write).
    pub fn action_name(&self, e: &TraceEntry) -> &str {
        match (e.action_str(), e.other_action) {
            (Some(n), _) => n,
            (None, Some(s)) => self.str(s),
            (None, None) => "",
        }
    }

    /// Total number of trace entries over all devices.
    pub fn trace_len(&self) -> usize {
        self.device_traces.iter().map(Trace::len).sum()
    }

    /// The device a report shows when none is asked for: the first with a
    /// trace (memory_viz's `_choose_device` takes the one with a trace; a
    /// multi-GPU host's snapshot lists every device's), else the first
    /// holding a segment, else 0.
    pub fn default_device(&self) -> usize {
        self.device_traces
            .iter()
            .position(|t| !t.is_empty())
            .or_else(|| {
                self.segments
                    .iter()
                    .filter_map(|s| usize::try_from(s.device).ok())
                    .min()
            })
            .unwrap_or(0)
    }
}

/// `segment_type`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SegmentType {
    /// `"large"`: the large pool (> 1 MiB blocks).
    #[default]
    Large,
    /// `"small"`: the small pool (≤ 1 MiB blocks, 2 MiB segments).
    Small,
    /// Anything else, verbatim.
    Other(String),
}

/// One segment: a range obtained from `cudaMalloc` (or an expandable segment).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// CUDA device index (0 when absent, as in 1.x snapshots).
    pub device: i64,
    /// Start address.
    pub address: u64,
    /// Size of the segment.
    pub total_size: u64,
    /// Bytes in `active_allocated` blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks (allocated or pending free).
    pub active_size: u64,
    /// Sum of the requested (unrounded) sizes (0 when absent).
    pub requested_size: u64,
    /// The CUDA stream (`cudaStream_t` as an integer).
    pub stream: u64,
    /// Which pool.
    pub segment_type: SegmentType,
    /// The private pool (CUDA graphs / MemPool) owning it; `(0, 0)` is the default pool.
    pub segment_pool_id: (u64, u64),
    /// Whether this is an expandable segment.
    pub is_expandable: bool,
    /// Where the segment was allocated.
    pub frames: StackId,
    /// Blocks carving up the segment, in address order.
    pub blocks: Vec<Block>,
}

impl Segment {
    /// A segment of the allocator twin's `snapshot()` on `device`, as
    /// `torch.cuda.memory._snapshot()` writes it: `frames` the segment's
    /// stack, `block_frames` an allocated block's stack by its address.
    pub fn of_twin(
        s: &vramscope_alloc::SegmentInfo,
        device: i64,
        frames: StackId,
        block_frames: impl Fn(u64) -> StackId,
    ) -> Segment {
        Segment {
            device,
            address: s.address,
            total_size: s.total_size,
            allocated_size: s.allocated_size,
            active_size: s.active_size,
            requested_size: s.requested_size,
            stream: s.stream,
            segment_type: if s.is_large {
                SegmentType::Large
            } else {
                SegmentType::Small
            },
            segment_pool_id: (0, 0),
            is_expandable: s.is_expandable,
            frames,
            blocks: s
                .blocks
                .iter()
                .map(|b| Block {
                    address: Some(b.address),
                    size: b.size,
                    requested_size: b.requested_size,
                    state: if b.allocated {
                        BlockState::ActiveAllocated
                    } else if b.active {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    },
                    frames: if b.allocated {
                        block_frames(b.address)
                    } else {
                        StackId::EMPTY
                    },
                    history: None,
                })
                .collect(),
        }
    }
}

/// `state` of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// `"active_allocated"`: in use by a tensor.
    ActiveAllocated,
    /// `"active_pending_free"` (older spelling `"active_awaiting_free"`):
    /// freed, but still used by another stream.
    ActivePendingFree,
    /// `"inactive"`: cached, free for reuse.
    Inactive,
    /// Another state string, verbatim.
    Other(Sym),
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Start address (present since PyTorch 2.0; older snapshots omit it).
    pub address: Option<u64>,
    /// Size of the block (rounded).
    pub size: u64,
    /// Size the caller requested (equals `size` when absent).
    pub requested_size: u64,
    /// State.
    pub state: BlockState,
    /// Where the block was allocated.
    pub frames: StackId,
    /// Legacy (PyTorch 1.13/2.0) per-block allocation history.
    pub history: Option<Vec<History>>,
}

/// Legacy history record of a block: `{addr, real_size, frames}`.
#[derive(Clone, Debug, PartialEq)]
pub struct History {
    /// Address of the allocation.
    pub addr: u64,
    /// Requested size.
    pub real_size: u64,
    /// Where it was allocated.
    pub frames: StackId,
}

/// An entry of `external_annotations`.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    /// `"START"` or `"END"`.
    pub stage: String,
    /// Annotation name (e.g. `"Optimizer.step#AdamW.step"`).
    pub name: String,
    /// Device index.
    pub device: i64,
    /// Timestamp in microseconds.
    pub time_us: i64,
    /// Any other keys, raw.
    pub other: Vec<(String, Value)>,
}

/// `roundup_power2_divisions`, in the forms PyTorch has written.
#[derive(Clone, Debug, PartialEq)]
pub enum RoundupPower2Divisions {
    /// Per power-of-two size bucket (MiB): `(bucket, divisions)`, e.g.
    /// `(1, 0), (2, 0), … (32768, 0)`; from the dict form with string keys
    /// `"1".."32768"`, or a list (bucket `2^i` for item `i`).
    PerBucket(Vec<(u64, u64)>),
    /// A single value for every bucket (older form).
    Uniform(u64),
    /// Something else, raw.
    Other(Value),
}

/// `allocator_settings`. Known keys are typed (`None` when absent or of an
/// unexpected type, in which case the raw value lands in `other`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as last applied.
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// `max_split_size` in bytes; `-1` means unlimited.
    pub max_split_size: Option<i64>,
    /// `garbage_collection_threshold` (0.0 = off).
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments`.
    pub expandable_segments: Option<bool>,
    /// `roundup_power2_divisions`.
    pub roundup_power2_divisions: Option<RoundupPower2Divisions>,
    /// `release_lock_on_cudamalloc`.
    pub release_lock_on_cudamalloc: Option<bool>,
    /// `pinned_num_register_threads`.
    pub pinned_num_register_threads: Option<i64>,
    /// `pinned_use_cuda_host_register`.
    pub pinned_use_cuda_host_register: Option<bool>,
    /// Other keys (e.g. `graph_capture_record_stream_reuse`), raw, in order.
    pub other: Vec<(String, Value)>,
}

impl AllocatorSettings {
    /// The settings a process reports whose allocator runs under `cfg`
    /// (`conf`: the settings string last given, `PYTORCH_CUDA_ALLOC_CONF`'s
    /// or `_accelerator_setAllocatorSettings`'s), every key PyTorch 2.11's
    /// `_cuda_memorySnapshot` writes.
    pub fn from_config(conf: &str, cfg: &AllocatorConfig) -> Self {
        AllocatorSettings {
            pytorch_cuda_alloc_conf: Some(conf.to_owned()),
            max_split_size: Some(if cfg.max_split_size == u64::MAX {
                -1
            } else {
                cfg.max_split_size as i64
            }),
            garbage_collection_threshold: Some(cfg.garbage_collection_threshold),
            expandable_segments: Some(cfg.expandable_segments),
            roundup_power2_divisions: Some(RoundupPower2Divisions::PerBucket(
                (0..ROUNDUP_INTERVALS)
                    .map(|i| (1u64 << i, cfg.roundup_power2_divisions[i]))
                    .collect(),
            )),
            release_lock_on_cudamalloc: Some(cfg.release_lock_on_cudamalloc),
            pinned_num_register_threads: Some(cfg.pinned_num_register_threads as i64),
            pinned_use_cuda_host_register: Some(cfg.pinned_use_cuda_host_register),
            // PyTorch 2.11 reports it (the H200's snapshots)
            other: vec![(
                "graph_capture_record_stream_reuse".to_owned(),
                Value::Bool(cfg.graph_capture_record_stream_reuse),
            )],
        }
    }
}
