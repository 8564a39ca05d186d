//! The report and its JSON schema (documented in docs/json.md, section
//! `vramscope inspect --json`). Fields are only ever added.

use serde::{Deserialize, Serialize};

/// Version of the JSON schema.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything `vramscope inspect` knows about one device's snapshot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// Schema version.
    pub schema_version: u32,
    /// The file inspected.
    pub snapshot: String,
    /// CUDA device index.
    pub device: usize,
    /// Trace entries of the device.
    pub trace_entries: usize,
    /// Whether the trace starts at the first allocation.
    pub trace_complete: bool,
    /// What the report cannot know, in words.
    pub unknown: Vec<String>,
    /// Peak allocated bytes (`allocated_bytes.all.peak` over the trace).
    pub peak_allocated_bytes: u64,
    /// Trace index of the peak of allocated bytes.
    pub peak_trace_index: Option<usize>,
    /// Time of that entry.
    pub peak_time_us: Option<i64>,
    /// Peak active bytes.
    pub peak_active_bytes: u64,
    /// Its trace index.
    pub peak_active_trace_index: Option<usize>,
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Its trace index.
    pub peak_reserved_trace_index: Option<usize>,
    /// Its time.
    pub peak_reserved_time_us: Option<i64>,
    /// Allocated bytes in the final segments.
    pub final_allocated_bytes: u64,
    /// Reserved bytes in the final segments.
    pub final_reserved_bytes: u64,
    /// What is allocated at the peak.
    pub live_at_peak: LiveAtPeak,
    /// Live bytes at the peak by category.
    pub categories: Vec<Category>,
    /// Fragmentation.
    pub fragmentation: Fragmentation,
    /// Out-of-memory events.
    pub ooms: Vec<Oom>,
    /// Downsampled timeline (per bucket: the maximum of each counter).
    pub timeline: Vec<Point>,
    /// The trace entries the peaks, the curve and the out-of-memory events
    /// are taken over (`inspect --range`); absent for the whole trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<TraceRange>,
}

/// Trace entries `from..to` (`to` excluded).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct TraceRange {
    /// First entry.
    pub from: usize,
    /// One past the last entry.
    pub to: usize,
}

/// Allocations live at the peak.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LiveAtPeak {
    /// Their bytes.
    pub bytes: u64,
    /// How many.
    pub count: usize,
    /// Distinct sites (before truncation to `--top`).
    pub site_count: usize,
    /// The top sites by bytes.
    pub sites: Vec<Site>,
    /// The largest allocations.
    pub top_tensors: Vec<Tensor>,
}

/// One allocation site.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Site {
    /// `file:line in function` of the top user frame.
    pub site: String,
    /// `forward` frames, outermost first, where readable.
    pub module_path: Option<String>,
    /// Bytes live at the peak.
    pub bytes: u64,
    /// Allocations live at the peak.
    pub count: usize,
    /// The category holding most of its bytes (`categories[0]`).
    pub category: String,
    /// Every category among its allocations with their bytes, most bytes
    /// first: a site can mix several (one line of a script allocates a
    /// model's activations and its optimizer's states).
    #[serde(default)]
    pub categories: Vec<SiteCategory>,
    /// Full stack of its largest allocation (with `--stacks`).
    pub stack: Vec<String>,
    /// Largest allocation.
    pub largest: u64,
}

/// A site's bytes in one category.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SiteCategory {
    /// The category.
    pub category: String,
    /// Its bytes live at the peak at this site.
    pub bytes: u64,
}

/// One allocation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tensor {
    /// Address.
    pub addr: u64,
    /// Block bytes.
    pub bytes: u64,
    /// Requested bytes.
    pub requested_bytes: u64,
    /// Trace index of its `alloc` (null: before the trace).
    pub alloc_trace_index: Option<usize>,
    /// Site.
    pub site: String,
    /// Category.
    pub category: String,
    /// Full stack (with `--stacks`).
    pub stack: Vec<String>,
}

/// A category of live memory and the evidence for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Category {
    /// `parameters`, `optimizer_state`, `optimizer_temporary`, `gradients`,
    /// `backward_temporary`, `activations`, `cublas_workspace`, `other`.
    pub category: String,
    /// Bytes live at the peak.
    pub bytes: u64,
    /// Allocations.
    pub count: usize,
    /// Up to three distinct evidence strings.
    pub evidence: Vec<String>,
}

/// Free-space layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LayoutJson {
    /// Inactive blocks in segments that also hold active blocks.
    pub inactive_split_bytes: u64,
    /// How many such blocks.
    pub inactive_split_blocks: u64,
    /// The largest inactive block.
    pub largest_free_block_bytes: u64,
    /// Bytes in segments with no active block.
    pub releasable_bytes: u64,
}

/// Fragmentation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fragmentation {
    /// Reserved minus allocated at the peak of allocated.
    pub reserved_minus_allocated_at_peak_bytes: u64,
    /// Layout at the peak (null when unknown).
    pub at_peak: Option<LayoutJson>,
    /// Layout at the end (from the final segments).
    pub at_end: LayoutJson,
    /// What `torch.cuda.empty_cache()` would release at the end.
    pub empty_cache_would_release_bytes: u64,
}

/// An out-of-memory event.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Oom {
    /// Trace index.
    pub trace_index: usize,
    /// Bytes requested.
    pub requested_bytes: u64,
    /// Free device memory reported.
    pub device_free_bytes: Option<u64>,
    /// Allocated just before.
    pub allocated_before_bytes: u64,
    /// Reserved just before.
    pub reserved_before_bytes: u64,
    /// Site of the failing allocation.
    pub site: String,
    /// Its stack (with `--stacks`).
    pub stack: Vec<String>,
}

/// One timeline point.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Trace index (of the bucket's maximum of allocated).
    pub trace_index: usize,
    /// Its time.
    pub time_us: Option<i64>,
    /// Allocated bytes.
    pub allocated_bytes: u64,
    /// Active bytes.
    pub active_bytes: u64,
    /// Reserved bytes.
    pub reserved_bytes: u64,
}
