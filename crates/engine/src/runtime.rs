//! One simulated PyTorch process: the device's caching allocator, the global
//! autograd switches, the per-thread cuBLAS workspaces and the record of
//! every live allocation (who made it and why).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use vramscope_alloc::{
    Addr, AllocatorConfig, CachingAllocator, ConfigError, DeviceStats, Handle, HostHeap, SimDevice,
    StreamId,
};

use crate::dtype::DType;
use crate::error::{EngineError, Result};
use crate::fastmap::FastMap;

/// Why an allocation exists (the event seam's categories).
pub use vramscope_events::Category;

/// One live allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocRecord {
    /// simulated device address
    pub addr: Addr,
    /// requested bytes
    pub bytes: u64,
    /// why it exists (updated when its role changes, e.g. saved for backward)
    pub category: Category,
    /// the ATen op that allocated it
    pub op: &'static str,
    /// the module path that was running (`""` at top level), shared with
    /// every other record of that module (a record per malloc would
    /// otherwise copy it)
    pub module: Rc<str>,
    /// the program's source line that made it (`file.py:123 in forward`;
    /// `""` where the front door does not know it), shared likewise
    pub source: Rc<str>,
    /// allocation order
    pub seq: u64,
}

/// One entry of the [`EventLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemEvent {
    /// a new allocation
    Alloc(AllocRecord),
    /// the allocation at this address was freed
    Free(Addr),
    /// the allocation at this address changed role (e.g. saved for backward)
    Recategorize(Addr, Category),
}

/// A CPU tensor's own mapping, as the [`EventLog`] keeps it for replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostEvent {
    /// glibc mapped this many bytes at this address
    Map(u64, u64),
    /// the mapping at this address was unmapped
    Unmap(u64),
    /// the dynamic loader mapped a library of this span at this address
    /// ([`SimDevice::load_library`]), never unmapped
    Library(u64, u64),
    /// a thread started and `malloc`ed: its stack of this length and its
    /// glibc arena, at this address ([`SimDevice::thread_started`]), never
    /// unmapped
    Thread(u64, u64),
    /// a thread started: its stack of this length at this address
    /// ([`SimDevice::thread_stack`]), never unmapped
    Stack(u64, u64),
    /// a started thread `malloc`ed first: its glibc arena at this address
    /// ([`SimDevice::thread_arena`]), never unmapped
    Arena(u64),
    /// the driver took address space of this length at this address,
    /// placed as a segment is ([`SimDevice::driver_map`]), never given back
    Driver(u64, u64),
    /// `cudaHostAlloc` mapped page-locked host memory of this length at
    /// this address ([`SimDevice::pinned_map`]), until an [`HostEvent::Unmap`]
    Pinned(u64, u64),
}

/// `what`, placed in a stream of events or requests: `at` of them come
/// before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At<T> {
    /// how many come before it
    pub at: usize,
    /// what happens there
    pub what: T,
}

/// What happened to device memory while the log ran
/// ([`Runtime::start_event_log`]).
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    /// the allocations live when the log started
    pub initial: Vec<AllocRecord>,
    /// every event since, in order
    pub events: Vec<MemEvent>,
    /// the highest `memory_allocated()` seen
    pub peak_allocated: i64,
    /// device memory the driver took outside the allocator (a new cuBLAS
    /// handle), in order, each with the number of events before it
    /// ([`DeviceProfile::blas_handle_bytes`])
    pub driver: Vec<At<u64>>,
    /// where the process's first kernels ran ([`Runtime::first_kernels`]),
    /// as the number of events before: a replay gives back the context's
    /// range there (a log started after that point has none)
    pub first_kernels: Option<usize>,
    /// where the process created its first cuBLAS handle, as the number of
    /// events before: the driver reserves address space there
    /// (`vramscope_alloc`'s `driver_va.rs`, rule 8)
    pub first_cublas: Option<usize>,
    /// CPU tensors glibc mapped and unmapped (`Runtime::host_malloc`) and
    /// libraries the loader mapped (`Runtime::load_cudnn`), in order, each
    /// with the number of events before it: a replay maps them there, as
    /// they move the segments
    pub host: Vec<At<HostEvent>>,
    /// events `[..peak_index]` lead to that peak
    pub peak_index: usize,
    /// the rule of each library scratch allocation that has one, by the
    /// allocation's `seq` ([`crate::ScratchRule`])
    pub scratch_rules: Vec<(u64, crate::ScratchRule)>,
    /// every count-dependent path a kernel took, in order, each with the
    /// number of events before it ([`crate::PathSwitch`])
    pub switches: Vec<At<crate::PathSwitch>>,
    /// a size was read from a table of measured shapes (cuDNN convolution
    /// workspaces) that holds the same problem at another batch size: at
    /// other shapes it follows no rule
    pub measured_sizes: bool,
    /// sizes taken without a measurement or a rule behind them, each once,
    /// in the order met (a cuDNN workspace for a convolution the measured
    /// table does not hold): what a report must say it did not know
    pub unmeasured: Vec<String>,
}

impl EventLog {
    /// The allocations live after the first `n` events, oldest first.
    pub fn live_after(&self, n: usize) -> Vec<AllocRecord> {
        // by address: the record and its category now (the survivors are
        // cloned at the end, not every allocation on the way)
        let mut live: FastMap<Addr, (&AllocRecord, Category)> = FastMap::default();
        for r in &self.initial {
            live.insert(r.addr, (r, r.category));
        }
        for e in &self.events[..n.min(self.events.len())] {
            match e {
                MemEvent::Alloc(r) => {
                    live.insert(r.addr, (r, r.category));
                }
                MemEvent::Free(a) => {
                    live.remove(a);
                }
                MemEvent::Recategorize(a, c) => {
                    if let Some(r) = live.get_mut(a) {
                        r.1 = *c;
                    }
                }
            }
        }
        // sorted before cloning, on keys read once (the records lie all
        // over the log)
        let mut v: Vec<(u64, &AllocRecord, Category)> =
            live.into_values().map(|(r, c)| (r.seq, r, c)).collect();
        v.sort_by_key(|x| x.0);
        v.into_iter()
            .map(|(_, r, category)| AllocRecord {
                category,
                ..r.clone()
            })
            .collect()
    }

    /// The allocations live at the peak.
    pub fn live_at_peak(&self) -> Vec<AllocRecord> {
        self.live_after(self.peak_index)
    }
}

/// A live allocation as the runtime keeps it: the module path is shared
/// (one `Rc<str>` per module entry), not copied per allocation.
#[derive(Debug, Clone)]
struct LiveRec {
    bytes: u64,
    category: Category,
    op: &'static str,
    module: Rc<str>,
    source: Rc<str>,
    seq: u64,
}

impl LiveRec {
    fn to_record(&self, addr: Addr) -> AllocRecord {
        AllocRecord {
            addr,
            bytes: self.bytes,
            category: self.category,
            op: self.op,
            module: self.module.clone(),
            source: self.source.clone(),
            seq: self.seq,
        }
    }
}

/// The live allocations, each in a slot its storage remembers
/// ([`Runtime::malloc`] returns it): a free or a change of role goes
/// straight to its record, where a map keyed by address would hash and
/// probe a table as large as everything live. Freed slots are reused.
/// Each keeps the allocator's [`Handle`] of its block, which frees it
/// without a lookup by address.
#[derive(Debug, Default)]
struct LiveSet {
    slots: Vec<Option<(Handle, LiveRec)>>,
    vacant: Vec<u32>,
}

impl LiveSet {
    fn insert(&mut self, addr: Handle, rec: LiveRec) -> u32 {
        match self.vacant.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some((addr, rec));
                slot
            }
            None => {
                self.slots.push(Some((addr, rec)));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, slot: u32) -> Option<(Handle, LiveRec)> {
        let taken = self.slots.get_mut(slot as usize)?.take();
        if taken.is_some() {
            self.vacant.push(slot);
        }
        taken
    }

    fn get(&self, slot: u32) -> Option<&(Handle, LiveRec)> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn get_mut(&mut self, slot: u32) -> Option<&mut (Handle, LiveRec)> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    fn iter(&self) -> impl Iterator<Item = &(Handle, LiveRec)> {
        self.slots.iter().flatten()
    }
}

/// Room for this many events is reserved when the event log starts: only
/// the pages the log fills are ever touched (the OS maps memory on first
/// use), and the log never moves, where a doubling `Vec` copies every event
/// again into fresh pages each time it fills (a 70B-parameter training run
/// logs about 50,000). Past it, the `Vec` grows as usual.
const EVENT_LOG_RESERVE: usize = 1 << 20;

/// A copy of the allocator twin and the handle of each live allocation
/// ([`Runtime::allocator_with_live`]).
pub struct AllocatorCopy {
    /// the allocator, as it is now
    pub allocator: CachingAllocator<SimDevice>,
    /// the handle of each live allocation, by address
    pub live: std::collections::HashMap<Addr, Handle>,
}

/// The event log's highest `memory_allocated()` ([`Runtime::event_log_peak`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogPeak {
    /// the bytes allocated then
    pub allocated: i64,
    /// the events that led to it ([`EventLog::peak_index`])
    pub events: usize,
}

pub use crate::gpus::{blas_workspace_sizes, BlasHandleBytes, BlasWorkspaces, DeviceProfile};

/// Which host thread runs an op: the Python thread or the autograd engine's
/// device thread (which has its own cuBLAS handle, hence its own workspace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Thread {
    /// the thread running the Python program
    Main,
    /// the autograd engine's CUDA device thread
    Autograd,
}

/// A cuBLAS handle: its host thread and its number there (0 the thread's
/// own, n > 0 a handle of the program's own threads, [`Runtime::blas_call`]).
type BlasOwner = (Thread, u32);

/// A cuBLAS or cuBLASLt workspace's key: its handle and stream
/// (`cublas_handle_stream_to_workspace`, CublasHandlePool.cpp).
type WorkspaceKey = (BlasOwner, StreamId);

impl State {
    /// What a report of running out of memory reads later: the module,
    /// the segments (when recording) and the figures at that moment.
    fn note_oom(&mut self) {
        self.last_oom_module = Some(
            self.modules
                .last()
                .map(|m| m.to_string())
                .unwrap_or_default(),
        );
        if self.alloc.recording_history() {
            self.oom_segments = Some(self.alloc.snapshot());
        }
        self.oom_figures = Some(figures_of(&self.alloc.reported_stats()));
        self.last_oom = None;
    }

    /// A CPU tensor's mapping of its own at `addr`, `len` bytes, noted in
    /// the event log (when recording) at the current event.
    fn note_host_map(&mut self, addr: u64, len: u64) {
        self.note_host(HostEvent::Map(addr, len));
    }

    /// A host event noted in the event log (when recording) at the current
    /// event.
    fn note_host(&mut self, what: HostEvent) {
        if let Some(log) = self.log.as_mut() {
            let at = log.events.len();
            log.host.push(At { at, what });
        }
    }
}

/// cuDNN's libraries (`.so.9` of the PyTorch 2.11+cu130 wheels), which the
/// process loads once each (`Runtime::load_cudnn`); the discriminant indexes
/// [`CUDNN_LIBRARY_SPANS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CudnnLibrary {
    /// `libcudnn_graph`: at the first `scaled_dot_product_attention` of any
    /// backend (its backend choice asks cuDNN), or the first cuDNN handle
    Graph = 0,
    /// `libcudnn_engines_precompiled`
    EnginesPrecompiled = 1,
    /// `libcudnn_heuristic`
    Heuristic = 2,
    /// `libcudnn_engines_runtime_compiled`
    EnginesRuntimeCompiled = 3,
    /// `libcudnn_ops`: at the first RNN call (its descriptors)
    Ops = 4,
    /// `libcudnn_adv`: at the first RNN call, after `libcudnn_ops`
    Adv = 5,
}

/// What a cuDNN graph-API plan (a convolution's, cuDNN attention's) loads,
/// in order: the graph library, then the engines, before the plan's
/// workspace (`fixtures/va_maps`, `first_conv_h200.json`).
const CUDNN_PLAN_LIBRARIES: [CudnnLibrary; 4] = [
    CudnnLibrary::Graph,
    CudnnLibrary::EnginesPrecompiled,
    CudnnLibrary::Heuristic,
    CudnnLibrary::EnginesRuntimeCompiled,
];

/// The spans the dynamic loader maps for cuDNN's libraries, by
/// [`CudnnLibrary`], each from its first mapping to the end of its `.bss`:
/// the first four measured (`/proc/PID/maps`, `fixtures/va_maps`;
/// `docs/driver-placement.md`), `libcudnn_ops` and `libcudnn_adv` on the
/// H100 at an LSTM's first `flatten_parameters` (B-554 to B-514 + 12 KiB,
/// B-664 to B-556 + 116 KiB:
/// `fixtures/run/probes/km67_lstm_flatten_first_cudnn_placement_probe_h100.txt`).
const CUDNN_LIBRARY_SPANS: [u64; 6] = [
    6_549_504,
    251_686_912,
    67_117_056,
    35_680_256,
    41_955_328,
    113_364_992,
];

/// The span of the driver's `libnvidia-ptxjitcompiler.so.580.159.04`, one
/// page-aligned mapping: its five mappings and `.bss`, contiguous, of
/// 2,355,200, 26,103,808, 9,027,584, 1,880,064, 61,440 and 20,480 bytes in
/// `fixtures/va_maps/first_conv_h200.json`; B-453.62 to B-416 on the H100
/// in `fixtures/run/probes/km67_lstm_flatten_first_cudnn_placement_probe_h100.txt`.
/// The driver loads it only where it must compile PTX its JIT cache does
/// not hold yet ([`Runtime::cudnn_rnn`]).
const PTXJIT_SPAN: u64 = 39_448_576;

/// What the driver takes, placed as a segment is, at a process's first
/// cuDNN handle, made for an RNN call or a plan ([`Runtime::cudnn_plan`]):
/// device memory of its own, then a 2 MiB page-locked buffer (a `/dev/zero`
/// `rw-s` mapping): 6 MiB where that call comes before the process's first
/// kernel, 2 MiB after other kernels. Measured on the H100 (rule 18 of
/// `docs/driver-placement.md`: blind298/km03's maps, km67's probe, blind303/kr04's maps).
const CUDNN_RNN_DRIVER_FIRST: u64 = 6 * 1024 * 1024;
/// See [`CUDNN_RNN_DRIVER_FIRST`].
const CUDNN_RNN_DRIVER_LATER: u64 = 2 * 1024 * 1024;
/// The driver's device memory at a cuDNN handle after other kernels grows
/// 2 MiB at a time, each piece placed as a 2 MiB segment is
/// (`validation/run/probes/ob80_cudnn_handle_pieces_probe_h100.out`: the
/// pieces fill a 2, 4 or 6 MiB hole from its low end and go on in the next).
const DRIVER_PIECE: u64 = 2 * 1024 * 1024;

/// The span of triton 3.6.0's `libtriton.so` (its LOAD segments, `readelf
/// -l`, to the page): the loader maps it whole, page aligned. The H200's
/// `/proc/self/maps` shows these segments, 141.28 MiB
/// (`validation/va_run_maps.py`, `docs/driver-placement.md` rule 10).
const LIBTRITON_SPAN: u64 = 148_140_032;

/// A new thread's stack: glibc's `allocate_stack` maps the default
/// size (`RLIMIT_STACK`, 8 MiB) and a 4 KiB guard page in one `mmap`
/// (8,392,704 bytes in `strace`; `---p` 4 KiB under an 8 MiB `rw-p` in the
/// H100's and H200's maps, `fixtures/va_maps`).
const THREAD_STACK: u64 = 8 * 1024 * 1024 + 4096;

/// The driver's page-locked buffers for blocks of this size or less: each
/// block takes the first buffer with room (blocks of 16 and 8 KiB share
/// one), a new buffer when none has. Measured on the H200
/// (`validation/va_pinned`, `fixtures/va_maps/pinned_h200.jsonl` and
/// `pinned2_h200.jsonl`).
const PINNED_BUFFER: u64 = 2 * 1024 * 1024;

/// How many of the process's page-locked buffers go into the driver's
/// pool's top (rule 14; its other two 2 MiB hold the driver's own), which
/// is not laid out: on the H200 the third of twelve 2 MiB blocks and every
/// later one went where a 2 MiB segment would. A buffer goes there only
/// while the pool's top is the newest chunk with room (rule 2); where a
/// chunk made after the pool has a 2 MiB hole it goes there, as a segment
/// would (blind352/mq02's first `.item()`: the H100's probe
/// `nh79_mq02_first_forward_pieces_probe_h100.out`).
const PINNED_BUFFERS_IN_POOL_TOP: usize = 2;

/// The host memory libcuda `malloc`s when it loads a kernel module lazily
/// (CUDA's default lazy loading), at the module's first kernel launch, and
/// never frees: (the module, named by the first op measured to load it; its
/// requests in order). Measured on the H200 (driver 580.159, PyTorch
/// 2.11.0+cu130) with `validation/malloc_log.c`, each op alone in a fresh
/// process (`validation/va_modules.py`, `fixtures/va_maps/modules_h200.tar.xz`);
/// `pow`'s (PowKernel.cu) also the same in 8 of 8 workloads of
/// `fixtures/va_maps/mlog`. `masked_fill`'s is also `index_add`'s. The ops of
/// each module are `_MODULE_OPS` in `python/vramscope/_capture.py`; the other
/// modules measured are not laid out (`docs/driver-placement.md`).
const MODULE_HOST_MALLOCS: [(&str, &[u64]); 2] = [
    ("pow", &[20_116_904, 20_278_247]),
    ("masked_fill", &[18_816_752, 19_257_087]),
];

pub(crate) struct State {
    pub(crate) alloc: CachingAllocator<SimDevice>,
    /// glibc's choice for CPU tensors: heap or a mapping of their own, in
    /// the address space the segments share (`Runtime::host_malloc`)
    pub(crate) host: HostHeap,
    pub(crate) profile: DeviceProfile,
    pub(crate) grad_enabled: bool,
    pub(crate) inference_mode: bool,
    pub(crate) thread: Thread,
    pub(crate) stream: StreamId,
    /// [`Runtime::set_parameters_on_device_unallocated`]
    unallocated_params: Option<DType>,
    /// `at::sequence_number` is thread-local.
    seq: [u64; 2],
    /// the cuBLAS handle of the calls now made: the thread's own (0) or a
    /// program thread's (n > 0, [`Runtime::blas_call`])
    blas_handle: u32,
    /// the workspaces' live slots, by (handle, stream)
    cublas_ws: Vec<(WorkspaceKey, u32)>,
    /// the handles created (handles outlive their workspaces:
    /// `_cuda_clearCublasWorkspaces` keeps them)
    blas_handles: Vec<BlasOwner>,
    /// bytes of the first handle's share already taken
    /// ([`Runtime::driver_outside_ahead_of_blas`])
    blas_prepaid: u64,
    /// Whether the device's stream pools are made ([`Runtime::stream_pools`]).
    stream_pools: bool,
    /// the host threads (by handle) that have run a 16-bit matmul
    blas_16bit: Vec<BlasOwner>,
    /// driver bytes waiting for the autograd thread's 16-bit share
    /// ([`Runtime::driver_outside_with_autograd_16bit`])
    autograd_16bit_pending: Vec<(&'static str, u64)>,
    /// cuDNN's libraries the process has loaded (`Runtime::load_cudnn`), a
    /// bit per [`CudnnLibrary`]
    cudnn_loaded: u8,
    /// the process has made a cuDNN handle (a plan's or an RNN call's:
    /// [`Runtime::cudnn_rnn`])
    cudnn_handle: bool,
    /// `libtriton.so` is mapped (`Runtime::triton_loaded`)
    triton_loaded: bool,
    /// the intra-op worker thread has started (`Runtime::intra_op_worker`)
    worker_started: bool,
    /// OpenMP's workers started by [`Runtime::intra_op_workers`], and how
    /// many of them have made their arena ([`Runtime::intra_op_work`])
    workers: (u32, u32),
    /// the bytes left in each of the driver's 2 MiB page-locked buffers
    /// that serve blocks of [`PINNED_BUFFER`] or less, oldest first
    pinned_buffers: Vec<u64>,
    /// how many of them went into the driver's pool's top (not laid out)
    pinned_in_pool_top: usize,
    /// the kernel modules of [`MODULE_HOST_MALLOCS`] loaded, by index
    modules_loaded: u32,
    /// the cuBLASLt workspaces' live slots, by (handle, stream)
    lt_ws: Vec<(WorkspaceKey, u32)>,
    live: LiveSet,
    /// the module paths entered, innermost last
    modules: Vec<Rc<str>>,
    /// the source line of a front door's allocation ([`Runtime::malloc_on`])
    source: Option<Rc<str>>,
    /// `""`, the module path at top level
    top_module: Rc<str>,
    pub(crate) category: Option<Category>,
    alloc_seq: u64,
    pub(crate) ops: u64,
    /// [`Runtime::first_kernels`] was called and the context's whole range
    /// goes back after the next allocation (the first op's, at its launch)
    first_kernels_pending: bool,
    // --- event log (peak attribution for estimates) ---
    log: Option<EventLog>,
    // --- autocast & saved-tensor hooks (autocast.rs, autograd/mod.rs, checkpoint.rs) ---
    pub(crate) autocast: crate::autocast::AutocastState,
    pub(crate) saved_hooks: crate::autograd::HooksState,
    /// the module path running at the last out-of-memory
    last_oom_module: Option<String>,
    /// the segments when the last out-of-memory was raised, kept while the
    /// allocator trace is recorded (what an out-of-memory observer that
    /// calls `_dump_snapshot` sees)
    oom_segments: Option<Vec<vramscope_alloc::SegmentInfo>>,
    /// the figures when the last out-of-memory was raised
    oom_figures: Option<MemoryFigures>,
    /// the allocator's account of the last out-of-memory, when the last
    /// one was the allocator's (not the driver's, at a library handle)
    last_oom: Option<vramscope_alloc::OutOfMemory>,
}

impl State {
    /// The category of the allocation in live slot `slot`.
    pub(crate) fn live_category(&self, slot: u32) -> Option<Category> {
        self.live.get(slot).map(|(_, r)| r.category)
    }
}

/// A simulated PyTorch process on one GPU. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Runtime {
    pub(crate) st: Rc<RefCell<State>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.st.borrow();
        f.debug_struct("Runtime")
            .field("device", &s.profile.name)
            .field("allocated", &s.alloc.stats().allocated_bytes.all().current)
            .finish()
    }
}

/// Settings of a simulated process.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// the GPU and library constants
    pub profile: DeviceProfile,
    /// `PYTORCH_CUDA_ALLOC_CONF`
    pub allocator: AllocatorConfig,
    /// The process starts before its first kernels, the CUDA context
    /// holding its range until [`Runtime::first_kernels`]
    /// ([`SimDevice::with_driver_placement`]); else as after them
    /// ([`SimDevice::new`]).
    pub fresh_process: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            profile: DeviceProfile::h100_torch_2_11(),
            allocator: AllocatorConfig::default(),
            fresh_process: false,
        }
    }
}

/// The figures `torch.cuda.memory_stats()` reports that the seeds record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryFigures {
    /// `memory_allocated()`
    pub allocated: i64,
    /// `max_memory_allocated()`
    pub peak: i64,
    /// `memory_reserved()`
    pub reserved: i64,
    /// `reserved_bytes.all.peak`
    pub peak_reserved: i64,
    /// `requested_bytes.all.current`
    pub requested: i64,
}

fn figures_of(s: &DeviceStats) -> MemoryFigures {
    MemoryFigures {
        allocated: s.allocated_bytes.all().current,
        peak: s.allocated_bytes.all().peak,
        reserved: s.reserved_bytes.all().current,
        peak_reserved: s.reserved_bytes.all().peak,
        requested: s.requested_bytes.all().current,
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new(RuntimeConfig::default())
    }
}

impl Runtime {
    /// A fresh process (`torch.cuda.init()`), nothing allocated.
    pub fn new(config: RuntimeConfig) -> Self {
        let (total, usable) = (config.profile.total_memory, config.profile.usable_memory);
        let dev = if config.fresh_process {
            SimDevice::with_driver_placement(total, usable)
        } else {
            SimDevice::new(total, usable)
        };
        let st = State {
            // every block is freed by its handle (LiveSet)
            alloc: CachingAllocator::with_device(config.allocator, dev).without_address_index(),
            host: HostHeap::default(),
            profile: config.profile,
            grad_enabled: true,
            inference_mode: false,
            thread: Thread::Main,
            stream: 0,
            unallocated_params: None,
            seq: [0, 0],
            blas_handle: 0,
            cublas_ws: Vec::new(),
            blas_handles: Vec::new(),
            blas_prepaid: 0,
            stream_pools: false,
            blas_16bit: Vec::new(),
            autograd_16bit_pending: Vec::new(),
            cudnn_loaded: 0,
            cudnn_handle: false,
            triton_loaded: false,
            worker_started: false,
            pinned_buffers: Vec::new(),
            pinned_in_pool_top: 0,
            workers: (0, 0),
            modules_loaded: 0,
            lt_ws: Vec::new(),
            live: LiveSet::default(),
            modules: Vec::new(),
            source: None,
            top_module: Rc::from(""),
            category: None,
            alloc_seq: 0,
            ops: 0,
            first_kernels_pending: false,
            log: None,
            autocast: Default::default(),
            saved_hooks: Default::default(),
            last_oom_module: None,
            oom_segments: None,
            oom_figures: None,
            last_oom: None,
        };
        Runtime {
            st: Rc::new(RefCell::new(st)),
        }
    }

    /// The GPU and library constants in force.
    pub fn profile(&self) -> DeviceProfile {
        self.st.borrow().profile.clone()
    }

    // ---- allocator ------------------------------------------------------------

    /// Allocate `bytes` for `op`: the address and the live slot that
    /// [`Runtime::free`] and [`Runtime::set_category`] take.
    pub(crate) fn malloc(
        &self,
        bytes: u64,
        op: &'static str,
        category: Category,
    ) -> Result<(Addr, u32)> {
        let mut st = self.st.borrow_mut();
        // a pack hook's exception in flight (checkpoint's early stop) stops the op here
        if let Some(e) = st.saved_hooks.raised_error() {
            return Err(e);
        }
        let stream = st.stream;
        let handle = match st.alloc.malloc_handle(bytes, stream) {
            Ok(h) => h,
            Err(e) => {
                st.note_oom();
                let detail = e.to_string();
                st.last_oom = Some(e);
                return Err(EngineError::OutOfMemory { op, bytes, detail });
            }
        };
        // an override (parameters, optimizer state, ...) never renames scratch
        let category = if category == Category::Workspace {
            category
        } else {
            st.category.unwrap_or(category)
        };
        let module = st.modules.last().unwrap_or(&st.top_module).clone();
        let source = st.source.as_ref().unwrap_or(&st.top_module).clone();
        st.alloc_seq += 1;
        let seq = st.alloc_seq;
        let rec = LiveRec {
            bytes,
            category,
            op,
            module,
            source,
            seq,
        };
        let st = &mut *st;
        if let Some(log) = st.log.as_mut() {
            log.events
                .push(MemEvent::Alloc(rec.to_record(handle.addr())));
            let current = st.alloc.stats().allocated_bytes.all().current;
            if current > log.peak_allocated {
                log.peak_allocated = current;
                log.peak_index = log.events.len();
            }
        }
        let slot = st.live.insert(handle, rec);
        if st.first_kernels_pending {
            st.first_kernels_pending = false;
            if st.alloc.device_mut().first_kernels() {
                if let Some(log) = st.log.as_mut() {
                    log.first_kernels = Some(log.events.len());
                }
            }
        }
        Ok((handle.addr(), slot))
    }

    /// Allocate `bytes` on `stream` for a front door outside the eager twin
    /// (a captured program): `op`, `module` and `source` say who asked.
    /// Returns the live slot [`Runtime::free_slot`] takes; out of memory as
    /// the GPU would be.
    pub fn malloc_on(
        &self,
        bytes: u64,
        stream: StreamId,
        category: Category,
        op: &'static str,
        module: Rc<str>,
        source: Rc<str>,
    ) -> Result<u32> {
        let saved = {
            let mut st = self.st.borrow_mut();
            st.modules.push(module);
            std::mem::replace(&mut st.stream, stream)
        };
        let r = self.with_source(source, || self.malloc(bytes, op, category));
        let mut st = self.st.borrow_mut();
        st.stream = saved;
        st.modules.pop();
        r.map(|(_, slot)| slot)
    }

    /// Run `f` with every allocation it makes filed under the program's
    /// line `source` (a library's workspace made inside a front door's call).
    pub fn with_source<T>(&self, source: Rc<str>, f: impl FnOnce() -> T) -> T {
        let saved = self.st.borrow_mut().source.replace(source);
        let out = f();
        self.st.borrow_mut().source = saved;
        out
    }

    /// The device address of the live slot `slot`'s block (None: not live).
    pub fn slot_addr(&self, slot: u32) -> Option<u64> {
        self.st.borrow().live.get(slot).map(|(h, _)| h.addr())
    }

    /// Free a slot [`Runtime::malloc_on`] returned.
    pub fn free_slot(&self, slot: u32) {
        self.free(slot);
    }

    /// `Tensor.record_stream(stream)` on the live slot `slot`: freed, its
    /// block waits for `stream`'s work (`recordStream`; the twin's streams
    /// have finished it by the next allocation).
    pub fn record_stream(&self, slot: u32, stream: StreamId) {
        let mut st = self.st.borrow_mut();
        let Some(&(handle, _)) = st.live.get(slot) else {
            return;
        };
        // a live block of this allocator: recording a stream cannot fail
        let _ = st.alloc.record_stream_handle(handle, stream);
    }

    /// File a slot [`Runtime::malloc_on`] returned under `category`.
    pub fn recategorize(&self, slot: u32, category: Category) {
        self.set_category(slot, category);
    }

    /// A cuBLAS call of a front door outside the eager twin on (`thread`,
    /// `stream`) with `thread`'s own handle (`handle` 0) or the n-th handle
    /// of the program's own threads: the handle, its workspace (and the
    /// cuBLASLt one when `lt`) on first use, as the eager twin's matrix
    /// products do.
    pub fn blas_call(
        &self,
        thread: Thread,
        handle: u32,
        stream: StreamId,
        dtype: DType,
        lt: bool,
        op: &'static str,
    ) -> Result<()> {
        let saved = std::mem::replace(&mut self.st.borrow_mut().stream, stream);
        let saved_handle = std::mem::replace(&mut self.st.borrow_mut().blas_handle, handle);
        let r = self.on_thread(thread, || {
            if lt {
                self.cublaslt_workspace(op, dtype)
            } else {
                self.cublas_handle(op, dtype)
            }
        });
        let mut st = self.st.borrow_mut();
        st.stream = saved;
        st.blas_handle = saved_handle;
        r
    }

    /// `with torch.cuda.stream(s):` around `f`: its allocations come from
    /// `stream`'s pools.
    pub fn with_stream<T>(&self, stream: StreamId, f: impl FnOnce() -> T) -> T {
        let saved = std::mem::replace(&mut self.st.borrow_mut().stream, stream);
        let r = f();
        self.st.borrow_mut().stream = saved;
        r
    }

    /// `Variable._execution_engine.queue_callback(f)` from inside a backward
    /// pass: `f` runs when the pass has run its last node.
    pub fn queue_callback(&self, f: crate::autograd::GradHook) {
        self.st.borrow_mut().saved_hooks.final_callbacks.push(f);
    }

    /// Parameters built from now on (`nn::parameter`) are placed on the
    /// device in `dtype` with an empty storage (`Some`), or on the CPU as
    /// `from_config` builds them (`None`): FSDP2's unsharded parameters, whose
    /// storage an all-gather fills and a reshard empties.
    pub fn set_parameters_on_device_unallocated(&self, dtype: Option<DType>) {
        self.st.borrow_mut().unallocated_params = dtype;
    }

    /// What [`Runtime::set_parameters_on_device_unallocated`] set.
    pub fn parameters_on_device_unallocated(&self) -> Option<DType> {
        self.st.borrow().unallocated_params
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_memory_stats(&self) {
        self.st.borrow_mut().alloc.reset_accumulated_stats();
    }

    /// Read the event log without stopping it (`None` when none runs).
    pub fn with_event_log<T>(&self, f: impl FnOnce(&EventLog) -> T) -> Option<T> {
        self.st.borrow().log.as_ref().map(f)
    }

    /// `torch.cuda.max_memory_reserved()`.
    pub fn max_memory_reserved(&self) -> i64 {
        self.st
            .borrow()
            .alloc
            .reported_stats()
            .reserved_bytes
            .all()
            .peak
    }

    /// Free the allocation in live slot `slot`.
    pub(crate) fn free(&self, slot: u32) {
        let mut st = self.st.borrow_mut();
        let Some((handle, _)) = st.live.remove(slot) else {
            return;
        };
        if let Some(log) = st.log.as_mut() {
            log.events.push(MemEvent::Free(handle.addr()));
        }
        // A free of a block the allocator handed out cannot fail.
        let _ = st.alloc.free_handle(handle);
    }

    /// A CPU tensor of `nbytes`: where glibc maps it when it gives it a
    /// mapping of its own, with the mapping's length
    /// ([`vramscope_alloc::HostHeap`]), among the segments
    /// ([`SimDevice::host_map`]); `None` when the heap serves it.
    pub(crate) fn host_malloc(&self, nbytes: u64) -> Option<(u64, u64)> {
        let mut st = self.st.borrow_mut();
        let len = st.host.malloc(nbytes)?;
        let addr = st.alloc.device_mut().host_map(len)?;
        st.note_host_map(addr, len);
        Some((addr, len))
    }

    /// A block of `len` bytes of PyTorch's caching host allocator
    /// (`pin_memory()`, `empty(..., pin_memory=True)`): `cudaHostAlloc`
    /// maps it among the segments (driver address-space rule 16); its
    /// address, which [`Runtime::pinned_free`] takes. `None` for a block
    /// of [`PINNED_BUFFER`] or less: it goes into one of the driver's 2 MiB
    /// buffers, a new one mapped among the segments unless the pool's top
    /// takes it ([`PINNED_BUFFERS_IN_POOL_TOP`]), none ever freed.
    pub fn pinned_alloc(&self, len: u64) -> Option<u64> {
        let mut st = self.st.borrow_mut();
        if len <= PINNED_BUFFER {
            if let Some(room) = st.pinned_buffers.iter_mut().find(|r| **r >= len) {
                *room -= len;
                return None;
            }
            st.pinned_buffers.push(PINNED_BUFFER - len);
            if st.pinned_in_pool_top < PINNED_BUFFERS_IN_POOL_TOP
                && st.alloc.device().pool_top_first(PINNED_BUFFER)
            {
                st.pinned_in_pool_top += 1;
            } else {
                let addr = st.alloc.device_mut().pinned_map(PINNED_BUFFER)?;
                st.note_host(HostEvent::Pinned(addr, PINNED_BUFFER));
            }
            return None;
        }
        let addr = st.alloc.device_mut().pinned_map(len)?;
        st.note_host(HostEvent::Pinned(addr, len));
        Some(addr)
    }

    /// `cudaFreeHost` of a block [`Runtime::pinned_alloc`] mapped (the
    /// host allocator's cache emptied): its range is free for segments.
    pub fn pinned_free(&self, addr: u64) {
        let mut st = self.st.borrow_mut();
        st.alloc.device_mut().host_unmap(addr);
        st.note_host(HostEvent::Unmap(addr));
    }

    /// A CPU tensor of `nbytes` made before the process's CUDA context
    /// (a model built on the host, then moved): where glibc's mapping of its
    /// own lies, above the context ([`SimDevice::host_map_above`], driver
    /// address-space rule 11; the caller gives them lowest first; `above`:
    /// where the lowest lies over the context's anchor, default the
    /// measured median), with its
    /// length; `None` when the heap serves it ([`vramscope_alloc::HostHeap`])
    /// or the context exists.
    /// [`Runtime::host_unmapped`] frees it.
    pub fn host_before_context(&self, nbytes: u64, above: Option<u64>) -> Option<(u64, u64)> {
        let mut st = self.st.borrow_mut();
        let len = st.host.malloc(nbytes)?;
        let addr = st.alloc.device_mut().host_map_above(len, above)?;
        st.note_host_map(addr, len);
        Some((addr, len))
    }

    /// A mapping of `len` bytes the process made before its CUDA context,
    /// at `offset` over the context's anchor, where rule 17's layout puts it
    /// (OpenMP's pool started on the host: `python/vramscope/_host_layout.py`):
    /// its address, or `None` once the context exists.
    /// [`Runtime::host_unmapped`] frees a tensor's.
    pub fn host_at(&self, offset: u64, len: u64) -> Option<u64> {
        let mut st = self.st.borrow_mut();
        let addr = st.alloc.device_mut().host_map_at(offset, len)?;
        st.note_host_map(addr, len);
        Some(addr)
    }

    /// Address space at `offset` over the context's anchor that rule 17's
    /// layout leaves free among the mappings made before the context.
    pub fn host_free_at(&self, offset: u64, len: u64) {
        self.st
            .borrow_mut()
            .alloc
            .device_mut()
            .host_free_at(offset, len);
    }

    /// The length of the mapping glibc makes for a CPU tensor of `nbytes`
    /// at the twin's dynamic threshold ([`vramscope_alloc::HostHeap::malloc`],
    /// driver address-space rule 7), or `None` when its heap serves it.
    pub fn host_mapping_len(&self, nbytes: u64) -> Option<u64> {
        self.st.borrow().host.malloc(nbytes)
    }

    /// glibc unmaps a CPU tensor's mapping ([`Runtime::host_before_context`]):
    /// its range is free for chunks, and the dynamic threshold may rise.
    pub fn host_unmapped(&self, addr: u64, len: u64) {
        self.host_free(addr, len);
    }

    /// The process loads those of cuDNN's libraries `libs` it has not
    /// loaded yet, in order (`vramscope_alloc`'s `driver_va.rs`, rule 9):
    /// they take address space among the segments, noted in the event log.
    /// A no-op on a device started after the first kernels
    /// ([`SimDevice::load_library`]).
    pub(crate) fn load_cudnn(&self, libs: &[CudnnLibrary]) {
        let mut st = self.st.borrow_mut();
        for &lib in libs {
            let bit = 1u8 << lib as u8;
            if st.cudnn_loaded & bit != 0 {
                continue;
            }
            st.cudnn_loaded |= bit;
            let span = CUDNN_LIBRARY_SPANS[lib as usize];
            let Some(addr) = st.alloc.device_mut().load_library(span) else {
                continue;
            };
            if let Some(log) = st.log.as_mut() {
                let at = log.events.len();
                log.host.push(At {
                    at,
                    what: HostEvent::Library(addr, span),
                });
            }
        }
    }

    /// A cuDNN RNN call (`_cudnn_rnn_flatten_weight`, `_cudnn_rnn`: the
    /// handle, then the RNN and tensor descriptors) is next. At the
    /// process's first cuDNN handle the graph library loads (rule 9): where
    /// no kernel has run yet, into the gap above the context that rule 7
    /// does not lay out (B+118, B+358 in the H100's maps), so taking no
    /// address space the twin holds; after other kernels under the lowest
    /// mapping (B-592 in km67's `after_mm`). Then, where `jit_cache_cold`
    /// (the machine's JIT cache lacks the kernels: its first such process),
    /// the driver maps `libnvidia-ptxjitcompiler` ([`PTXJIT_SPAN`], as host
    /// memory: rule 7); then it takes its device memory and page-locked
    /// buffer ([`CUDNN_RNN_DRIVER_FIRST`]); then `libcudnn_ops` and
    /// `libcudnn_adv` load where not loaded. The H100's order, from where
    /// each lies (km03's maps of session 68, op 90: the driver's chunk
    /// directly under the context, `ops` under it at B-490, `adv` at B-600;
    /// km67's probe, `plain`: the ptxjit library directly under the context,
    /// the chunk under it, `ops` at B-554, `adv` at B-664; after a cuDNN
    /// convolution only `ops` and `adv`). A no-op after the first time, and
    /// on a device started after the first kernels.
    pub fn cudnn_rnn(&self, jit_cache_cold: bool) {
        let first_handle = !std::mem::replace(&mut self.st.borrow_mut().cudnn_handle, true);
        if first_handle {
            let fresh = self.st.borrow().alloc.device().kernels_pending();
            if fresh {
                // above the context, in a gap the twin does not lay out
                self.st.borrow_mut().cudnn_loaded |= 1 << CudnnLibrary::Graph as u8;
            } else {
                self.load_cudnn(&[CudnnLibrary::Graph]);
            }
            let mut st = self.st.borrow_mut();
            if fresh && jit_cache_cold {
                if let Some(addr) = st.alloc.device_mut().map_library(PTXJIT_SPAN) {
                    st.note_host_map(addr, PTXJIT_SPAN);
                }
            }
            drop(st);
            self.cudnn_handle_driver(fresh);
        }
        self.load_cudnn(&[CudnnLibrary::Ops, CudnnLibrary::Adv]);
    }

    /// The driver's share of the process's first cuDNN handle, placed as
    /// segments are: its device memory ([`CUDNN_RNN_DRIVER_FIRST`] where no
    /// kernel has run, else [`CUDNN_RNN_DRIVER_LATER`]), then a
    /// [`PINNED_BUFFER`] page-locked buffer; address space only, for good.
    fn cudnn_handle_driver(&self, fresh: bool) {
        let mut st = self.st.borrow_mut();
        let driver = if fresh {
            CUDNN_RNN_DRIVER_FIRST
        } else {
            CUDNN_RNN_DRIVER_LATER
        };
        if let Some(addr) = st.alloc.device_mut().driver_map(driver) {
            st.note_host(HostEvent::Driver(addr, driver));
        }
        // the handle's page-locked buffer is one of the driver's small-block
        // buffers, which the host allocator's small blocks share: where one
        // is already mapped (a first `.item()`, rule 16) no other comes
        // (blind312/la02's H100 maps: its first `.item()` mapped one, its
        // first cuDNN convolution none; blind303/kr04's: its first cuDNN
        // attention mapped one, its later `.item()`s none)
        if st.pinned_buffers.is_empty() {
            if let Some(addr) = st.alloc.device_mut().driver_map(PINNED_BUFFER) {
                st.pinned_buffers.push(PINNED_BUFFER);
                st.note_host(HostEvent::Driver(addr, PINNED_BUFFER));
            }
        }
    }

    /// The process imports `torch._dynamo`, which loads triton's
    /// `libtriton.so` (`vramscope_alloc`'s `driver_va.rs`, rule 10): it
    /// takes address space among the segments, noted in the event log as a
    /// mapping never unmapped. Once; a no-op on a device started after the
    /// first kernels ([`SimDevice::map_library`]).
    pub fn triton_loaded(&self) {
        let mut st = self.st.borrow_mut();
        if std::mem::replace(&mut st.triton_loaded, true) {
            return;
        }
        let Some(addr) = st.alloc.device_mut().map_library(LIBTRITON_SPAN) else {
            return;
        };
        if let Some(log) = st.log.as_mut() {
            let at = log.events.len();
            log.host.push(At {
                at,
                what: HostEvent::Map(addr, LIBTRITON_SPAN),
            });
        }
    }

    /// An op has just launched a kernel of the module `module` (a name of
    /// [`MODULE_HOST_MALLOCS`], `"pow"`): the first time in the process, the
    /// module loads, and libcuda's requests that glibc maps on their own
    /// ([`vramscope_alloc::HostHeap`]) take address space among the segments
    /// for good (driver address-space rule 12), noted in the event log. A
    /// no-op for a module the twin does not know, for one already loaded,
    /// and on a device started after the first kernels.
    pub fn kernel_module(&self, module: &str) {
        let Some(k) = MODULE_HOST_MALLOCS
            .iter()
            .position(|&(name, _)| name == module)
        else {
            return;
        };
        let mut st = self.st.borrow_mut();
        if st.modules_loaded & (1 << k) != 0 {
            return;
        }
        st.modules_loaded |= 1 << k;
        for &nbytes in MODULE_HOST_MALLOCS[k].1 {
            let Some(len) = st.host.malloc_plain(nbytes) else {
                continue;
            };
            if let Some(addr) = st.alloc.device_mut().map_library(len) {
                st.note_host_map(addr, len);
            }
        }
    }

    /// The process's first CPU op that ATen runs in parallel
    /// (`at::parallel_for` over more than its grain size, 32,768 elements)
    /// starts OpenMP's worker thread (`validation/hf_cases.sh` sets
    /// `OMP_NUM_THREADS=2`: one worker beside the main thread), whose first
    /// `malloc` makes its glibc arena: its stack and arena take address
    /// space for good
    /// ([`SimDevice::thread_started`]), noted in the event log. Once; a
    /// no-op on a device started after the first kernels.
    pub fn intra_op_worker(&self) {
        let mut st = self.st.borrow_mut();
        if std::mem::replace(&mut st.worker_started, true) {
            return;
        }
        let Some(addr) = st.alloc.device_mut().thread_started(THREAD_STACK) else {
            return;
        };
        if let Some(log) = st.log.as_mut() {
            let at = log.events.len();
            log.host.push(At {
                at,
                what: HostEvent::Thread(addr, THREAD_STACK),
            });
        }
    }

    /// OpenMP's pool of `n` workers starts at once (`vramscope run`: the
    /// process's first parallel CPU op once the context exists), each a
    /// thread by driver address-space rule 15, noted in the event log: the
    /// first `working` of them take a share of the op's loop and `malloc`
    /// (their arena follows their stack), the others make their arena at
    /// their first share ([`Runtime::intra_op_work`]). Measured: the H200
    /// runs of blind153/ew01 and blind175/fs03 (docs/driver-placement.md,
    /// rule 15). Once, shared with
    /// [`Runtime::intra_op_worker`]; a no-op on a device started after the
    /// first kernels.
    pub fn intra_op_workers(&self, n: u32, working: u32) {
        let mut st = self.st.borrow_mut();
        if std::mem::replace(&mut st.worker_started, true) {
            return;
        }
        st.workers = (n, 0);
        for k in 0..n {
            let Some(addr) = st.alloc.device_mut().thread_stack(THREAD_STACK) else {
                return;
            };
            st.note_host(HostEvent::Stack(addr, THREAD_STACK));
            if k < working {
                st.workers.1 += 1;
                let Some(arena) = st.alloc.device_mut().thread_arena() else {
                    return;
                };
                st.note_host(HostEvent::Arena(arena));
            }
        }
    }

    /// A parallel CPU op shares its loop among `working` of OpenMP's
    /// workers (`at::parallel_for`: one share per grain of 32,768 elements,
    /// at most one per thread): each of them that has not `malloc`ed yet
    /// makes its glibc arena now, in order (rule 15). A no-op before
    /// [`Runtime::intra_op_workers`].
    pub fn intra_op_work(&self, working: u32) {
        let mut st = self.st.borrow_mut();
        let (n, made) = st.workers;
        for _ in made..working.min(n) {
            st.workers.1 += 1;
            let Some(arena) = st.alloc.device_mut().thread_arena() else {
                return;
            };
            st.note_host(HostEvent::Arena(arena));
        }
    }

    /// A blocking host-to-device copy that converts the dtype (`Copy.cu`'s
    /// `copy_kernel_cuda`: `src.to(dst.dtype())` on the host, then the
    /// copy): its CPU temporary of `nbytes` (driver rule 7) lives through the
    /// conversion, during which OpenMP's `workers` start below it (rule 15;
    /// none where `workers` is 0), and is freed after the copy. Measured:
    /// docs/driver-placement.md, session 37.
    pub fn host_conversion(&self, nbytes: u64, workers: u32, working: u32) {
        let placed = self.host_malloc(nbytes);
        if workers > 0 {
            self.intra_op_workers(workers, working);
        } else {
            self.intra_op_work(working);
        }
        if let Some((addr, len)) = placed {
            self.host_free(addr, len);
        }
    }

    /// The driver's pool's top 8 MiB are laid out from its reservation on
    /// (`driver_va.rs`, rule 14): `vramscope run`'s device.
    pub fn lay_out_pool_top(&self) {
        self.st.borrow_mut().alloc.device_mut().lay_out_pool_top();
    }

    /// The process launches its first kernel: the driver takes 2 MiB of its
    /// own (`driver_va.rs`, rule 6). The context's range goes back later,
    /// at [`Runtime::kernels_launched`], where the kernel is not one that
    /// keeps it. A no-op after the first time.
    pub fn first_launch(&self) {
        self.st.borrow_mut().alloc.device_mut().first_launch();
    }

    /// `scaled_dot_product_attention` chooses its backend, which asks cuDNN:
    /// the process loads cuDNN's graph library if it has not (rule 9).
    pub fn sdpa_backend_choice(&self) {
        self.load_cudnn(&[CudnnLibrary::Graph]);
    }

    /// A cuDNN graph-API plan (a convolution's) is built next: the process
    /// loads cuDNN's graph and engine libraries if it has not (measured at
    /// a first convolution: `fixtures/va_maps/first_conv_h200.json`).
    ///
    /// Where the plan makes the process's first cuDNN handle, the driver
    /// takes what it takes for an RNN's ([`Self::cudnn_handle_driver`])
    /// after the graph library and before the engines (measured: blind303/kr04's
    /// H100 maps, `validation/run/probes/mw78_kr04_assert_buffer_probe_h100.out`).
    pub fn cudnn_plan(&self) {
        self.cudnn_plan_pieces(0, 0);
    }

    /// [`Self::cudnn_plan`], where the plan makes the process's first cuDNN
    /// handle after other kernels, with `before` and `after` more
    /// [`DRIVER_PIECE`]s of the driver's (each placed as a 2 MiB segment:
    /// [`Self::driver_piece`]) before and after the handle's own
    /// ([`Self::cudnn_handle_driver`]).
    pub fn cudnn_plan_pieces(&self, before: u32, after: u32) {
        let first_handle = !std::mem::replace(&mut self.st.borrow_mut().cudnn_handle, true);
        if first_handle {
            self.load_cudnn(&[CudnnLibrary::Graph]);
            let fresh = self.st.borrow().alloc.device().kernels_pending();
            for _ in 0..if fresh { 0 } else { before } {
                self.driver_piece(DRIVER_PIECE);
            }
            self.cudnn_handle_driver(fresh);
            for _ in 0..if fresh { 0 } else { after } {
                self.driver_piece(DRIVER_PIECE);
            }
        }
        self.load_cudnn(&CUDNN_PLAN_LIBRARIES);
    }

    /// The driver takes `len` bytes of address space for good, placed as a
    /// segment is (`SimDevice::driver_map`: rules 2, 1 and 3): one of the
    /// pieces it takes at a cuDNN handle (driver address-space rule 18; the
    /// autograd thread's: `Capture.cudnn_thread_handle`). Its address, or
    /// `None` on a device started after the first kernels.
    pub fn driver_piece(&self, len: u64) -> Option<u64> {
        let mut st = self.st.borrow_mut();
        let addr = st.alloc.device_mut().driver_map(len)?;
        st.note_host(HostEvent::Driver(addr, len));
        Some(addr)
    }

    /// A CPU tensor [`Runtime::host_malloc`] mapped is freed: glibc unmaps
    /// it (and may raise its threshold).
    pub(crate) fn host_free(&self, addr: u64, len: u64) {
        let mut st = self.st.borrow_mut();
        st.host.free_mapped(len);
        st.alloc.device_mut().host_unmap(addr);
        if let Some(log) = st.log.as_mut() {
            let at = log.events.len();
            log.host.push(At {
                at,
                what: HostEvent::Unmap(addr),
            });
        }
    }

    /// File the allocation in live slot `slot` under `category`.
    pub(crate) fn set_category(&self, slot: u32, category: Category) {
        let mut st = self.st.borrow_mut();
        let Some((addr, r)) = st.live.get_mut(slot) else {
            return;
        };
        r.category = category;
        let addr = addr.addr();
        if let Some(log) = st.log.as_mut() {
            log.events.push(MemEvent::Recategorize(addr, category));
        }
    }

    /// [`Runtime::set_category`] if the allocation's category is `from`.
    pub(crate) fn set_category_if(&self, slot: u32, from: Category, to: Category) {
        if self.st.borrow().live_category(slot) == Some(from) {
            self.set_category(slot, to);
        }
    }

    /// The live allocations, in allocation order.
    /// `torch.cuda.set_per_process_memory_fraction(fraction)`: the allocator
    /// may hold at most `fraction x total_memory` bytes (`CUDAAllocator`
    /// rejects a fraction outside `[0, 1]`).
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(EngineError::Mismatch {
                op: "set_per_process_memory_fraction",
                detail: format!("invalid fraction {fraction}, expected a value in [0, 1]"),
            });
        }
        self.st.borrow_mut().alloc.set_memory_fraction(fraction);
        Ok(())
    }

    /// `torch.cuda.get_per_process_memory_fraction()`: the allocator's limit
    /// over the device's total memory (1.0 without one).
    pub fn memory_fraction(&self) -> f64 {
        self.st.borrow().alloc.memory_fraction()
    }

    /// `torch._C._accelerator_setAllocatorSettings(env)` (and its deprecated
    /// alias `torch.cuda.memory._set_allocator_settings`): the allocator's
    /// settings change from here on
    /// ([`vramscope_alloc::CachingAllocator::set_allocator_settings`]).
    pub fn set_allocator_settings(&self, env: &str) -> std::result::Result<(), ConfigError> {
        self.st.borrow_mut().alloc.set_allocator_settings(env)
    }

    /// The allocator's settings in force.
    pub fn allocator_config(&self) -> AllocatorConfig {
        self.st.borrow().alloc.config().clone()
    }

    /// Start (or restart) the event log: every allocation, free and change
    /// of category from now on, and the point where `memory_allocated()`
    /// reached its highest value (never reset by `reset_peak_memory_stats`).
    pub fn start_event_log(&self) {
        let mut st = self.st.borrow_mut();
        let current = st.alloc.stats().allocated_bytes.all().current;
        let live: Vec<AllocRecord> = {
            let mut v: Vec<AllocRecord> =
                st.live.iter().map(|(h, r)| r.to_record(h.addr())).collect();
            v.sort_by_key(|r| r.seq);
            v
        };
        st.log = Some(EventLog {
            initial: live,
            events: Vec::with_capacity(EVENT_LOG_RESERVE),
            peak_allocated: current,
            peak_index: 0,
            driver: Vec::new(),
            first_kernels: None,
            first_cublas: None,
            host: Vec::new(),
            scratch_rules: Vec::new(),
            switches: Vec::new(),
            measured_sizes: false,
            unmeasured: Vec::new(),
        });
    }

    /// Mark the event log: a size came from a table of measured shapes.
    pub(crate) fn note_measured_size(&self) {
        if let Some(log) = self.st.borrow_mut().log.as_mut() {
            log.measured_sizes = true;
        }
    }

    /// Note in the event log a size taken without a measurement (`what`
    /// says which and what was taken), once per distinct note.
    pub(crate) fn note_unmeasured(&self, what: String) {
        if let Some(log) = self.st.borrow_mut().log.as_mut() {
            if !log.unmeasured.contains(&what) {
                log.unmeasured.push(what);
            }
        }
    }

    /// Note in the event log that a kernel chose its path by `count`
    /// against `threshold` ([`crate::PathSwitch`]).
    pub(crate) fn note_switch(&self, count: i64, threshold: i64) {
        if let Some(log) = self.st.borrow_mut().log.as_mut() {
            let at = log.events.len();
            log.switches.push(At {
                at,
                what: crate::PathSwitch { count, threshold },
            });
        }
    }

    /// Keep `rule` in the event log for the allocation live at `addr`
    /// (library scratch: how its size was computed). The log's last word
    /// on `addr` says whether it is live (the allocation is most often the
    /// last event).
    pub(crate) fn note_scratch_rule(&self, addr: Addr, rule: crate::ScratchRule) {
        let mut st = self.st.borrow_mut();
        let Some(log) = st.log.as_mut() else {
            return;
        };
        let last = log.events.iter().rev().find_map(|e| match e {
            MemEvent::Alloc(r) if r.addr == addr => Some(Some(r.seq)),
            MemEvent::Free(a) if *a == addr => Some(None),
            _ => None,
        });
        let seq = match last {
            Some(seq) => seq,
            // allocated before the log started
            None => log.initial.iter().find(|r| r.addr == addr).map(|r| r.seq),
        };
        if let Some(seq) = seq {
            log.scratch_rules.push((seq, rule));
        }
    }

    /// The caching allocator's account of the last out-of-memory, when the
    /// allocator raised it (`None` when it was the driver's, at a cuBLAS or
    /// cuDNN handle): [`vramscope_alloc::OutOfMemory::torch_message`] is
    /// PyTorch's whole message.
    pub fn last_out_of_memory(&self) -> Option<vramscope_alloc::OutOfMemory> {
        self.st.borrow().last_oom.clone()
    }

    /// The module path that was running at the last out-of-memory.
    pub fn last_oom_module(&self) -> Option<String> {
        self.st.borrow().last_oom_module.clone()
    }

    /// Stop the event log and hand it over.
    pub fn take_event_log(&self) -> Option<EventLog> {
        self.st.borrow_mut().log.take()
    }

    /// Every live allocation, oldest first.
    pub fn live_allocations(&self) -> Vec<AllocRecord> {
        let mut v: Vec<AllocRecord> = self
            .st
            .borrow()
            .live
            .iter()
            .map(|(h, r)| r.to_record(h.addr()))
            .collect();
        v.sort_by_key(|r| r.seq);
        v
    }

    /// Bytes (requested) live per category.
    pub fn bytes_by_category(&self) -> Vec<(Category, u64)> {
        let mut m: HashMap<Category, u64> = HashMap::new();
        for (_, r) in self.st.borrow().live.iter() {
            *m.entry(r.category).or_default() += r.bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|(c, _)| c.to_string());
        v
    }

    /// A copy of the allocator twin in its present state.
    pub fn allocator(&self) -> CachingAllocator<SimDevice> {
        self.st.borrow().alloc.clone()
    }

    /// A copy of the allocator twin, with the [`Handle`] of each live
    /// allocation by address: what a caller needs to go on serving requests
    /// on the copy, frees of the blocks live now included.
    pub fn allocator_with_live(&self) -> AllocatorCopy {
        let st = self.st.borrow();
        AllocatorCopy {
            allocator: st.alloc.clone(),
            live: st.live.iter().map(|(h, _)| (h.addr(), *h)).collect(),
        }
    }

    /// The event log's highest `memory_allocated()` so far and where.
    pub fn event_log_peak(&self) -> Option<LogPeak> {
        let st = self.st.borrow();
        st.log.as_ref().map(|l| LogPeak {
            allocated: l.peak_allocated,
            events: l.peak_index,
        })
    }

    /// Start recording the allocator twin's best fits
    /// ([`CachingAllocator::record_fits`]); a copy of the allocator
    /// ([`Self::allocator`]) carries them.
    pub fn record_fits(&self) {
        self.st.borrow_mut().alloc.record_fits();
    }

    /// `torch.cuda.memory_stats()` as the allocator twin keeps it (under
    /// `backend:cudaMallocAsync`, its pool's figures alone).
    pub fn stats(&self) -> DeviceStats {
        self.st.borrow().alloc.reported_stats().into_owned()
    }

    /// Whether the allocator is `backend:cudaMallocAsync`'s.
    pub fn is_malloc_async(&self) -> bool {
        self.st.borrow().alloc.is_malloc_async()
    }

    /// The five figures the seed probe records.
    pub fn figures(&self) -> MemoryFigures {
        figures_of(&self.st.borrow().alloc.reported_stats())
    }

    /// The figures when the last out-of-memory was raised (before whatever
    /// the unwinding freed).
    pub fn oom_figures(&self) -> Option<MemoryFigures> {
        self.st.borrow().oom_figures
    }

    /// `torch.cuda.memory_allocated()`.
    pub fn memory_allocated(&self) -> i64 {
        self.figures().allocated
    }
    /// `torch.cuda.max_memory_allocated()`.
    pub fn max_memory_allocated(&self) -> i64 {
        self.figures().peak
    }
    /// `torch.cuda.mem_get_info()`: (free, total) bytes of the device, the
    /// CUDA context and the driver's own allocations taken out.
    pub fn mem_get_info(&self) -> (u64, u64) {
        self.st.borrow().alloc.mem_info()
    }

    /// `torch.cuda.memory_reserved()`.
    pub fn memory_reserved(&self) -> i64 {
        self.figures().reserved
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&self) {
        self.st.borrow_mut().alloc.empty_cache();
    }

    /// `emptyCache(mempool_id)` of a released private pool: its streams' unsplit cached blocks.
    pub fn empty_cache_of(&self, streams: &[u64]) {
        self.st.borrow_mut().alloc.empty_cache_of(streams);
    }

    /// Whether `empty_cache` leaves `stream`'s cached blocks alone (a live
    /// CUDA graph's private pool).
    pub fn keep_through_empty_cache(&self, stream: u64, keep: bool) {
        self.st
            .borrow_mut()
            .alloc
            .keep_through_empty_cache(stream, keep);
    }

    /// `beginAllocateToPool` (a CUDA graph's capture, `use_mem_pool`): a
    /// capture is underway until [`Runtime::end_allocate_to_pool`].
    pub fn begin_allocate_to_pool(&self) {
        self.st.borrow_mut().alloc.begin_allocate_to_pool();
    }

    /// `endAllocateToPool`.
    pub fn end_allocate_to_pool(&self) {
        self.st.borrow_mut().alloc.end_allocate_to_pool();
    }

    /// A private pool's stream: pool `pool`'s blocks allocated on `stream`
    /// are kept under the stream id `private`.
    pub fn register_private_stream(&self, private: u64, pool: u64, stream: u64) {
        self.st
            .borrow_mut()
            .alloc
            .register_private_stream(private, pool, stream);
    }

    /// `setNoSplit` (`MemPool(no_split=True)`).
    pub fn set_no_split(&self, pool: u64) {
        self.st.borrow_mut().alloc.set_no_split(pool);
    }

    /// `setUseOnOOM` (`MemPool(use_on_oom=True)`, `~MemPool`).
    pub fn set_use_on_oom(&self, pool: u64, use_on_oom: bool) {
        self.st.borrow_mut().alloc.set_use_on_oom(pool, use_on_oom);
    }

    /// `stream` begins capturing a CUDA graph.
    pub fn capture_stream_begin(&self, stream: u64) {
        self.st.borrow_mut().alloc.capture_stream_begin(stream);
    }

    /// A node captured on `stream`.
    pub fn capture_stream_op(&self, stream: u64) {
        self.st.borrow_mut().alloc.capture_stream_op(stream);
    }

    /// An event recorded on `stream` (during a capture).
    pub fn capture_event_record(&self, event: u64, stream: u64) {
        self.st
            .borrow_mut()
            .alloc
            .capture_event_record(event, stream);
    }

    /// `stream` waits on `event` (during a capture).
    pub fn capture_event_wait(&self, stream: u64, event: u64) {
        self.st.borrow_mut().alloc.capture_event_wait(stream, event);
    }

    /// The capture begun on `stream` ends.
    pub fn capture_stream_end(&self, stream: u64) {
        self.st.borrow_mut().alloc.capture_stream_end(stream);
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_memory_stats(&self) {
        self.st.borrow_mut().alloc.reset_peak_stats();
    }

    /// Start recording the allocator trace (`_record_memory_history`).
    pub fn record_memory_history(&self, enabled: bool) {
        self.st.borrow_mut().alloc.record_history(enabled);
    }

    /// The allocator trace recorded so far.
    pub fn trace(&self) -> Vec<vramscope_alloc::TraceEntry> {
        self.st.borrow().alloc.trace().to_vec()
    }

    /// The number of allocator trace entries recorded so far.
    pub fn trace_len(&self) -> usize {
        self.st.borrow().alloc.trace().len()
    }

    /// `torch.cuda.memory_snapshot()`: the segments and their blocks now.
    pub fn segments(&self) -> Vec<vramscope_alloc::SegmentInfo> {
        self.st.borrow().alloc.snapshot()
    }

    /// The segments when the last out-of-memory was raised (only while the
    /// allocator trace is recorded).
    pub fn oom_segments(&self) -> Option<Vec<vramscope_alloc::SegmentInfo>> {
        self.st.borrow().oom_segments.clone()
    }

    /// `torch._C._cuda_clearCublasWorkspaces()`: frees every cuBLAS and
    /// cuBLASLt workspace (`empty_cache()` does not).
    pub fn clear_cublas_workspaces(&self) {
        let slots: Vec<u32> = {
            let mut st = self.st.borrow_mut();
            let mut v: Vec<u32> = st.cublas_ws.drain(..).map(|(_, s)| s).collect();
            v.extend(st.lt_ws.drain(..).map(|(_, s)| s));
            v
        };
        for s in slots {
            self.free(s);
        }
    }

    /// The cuBLAS and cuBLASLt workspace sizes that the workspaces made from
    /// now on take (`None`: the GPU's default, [`blas_workspace_sizes`]):
    /// PyTorch reads `CUBLAS_WORKSPACE_CONFIG` and `CUBLASLT_WORKSPACE_SIZE`
    /// when it makes one (`getChosenWorkspaceSize`,
    /// `getCUDABlasLtWorkspaceSize`, CublasHandlePool.cpp); those made
    /// before keep theirs.
    pub fn set_blas_workspaces(&self, cublas: Option<u64>, lt: Option<u64>) {
        let mut st = self.st.borrow_mut();
        let default = blas_workspace_sizes(st.profile.capability, st.profile.torch);
        st.profile.cublas_workspace = cublas.unwrap_or(default.cublas);
        st.profile.cublaslt_workspace = lt.unwrap_or(default.cublas_lt);
    }

    /// `getCurrentCUDABlasHandle()`: the first call on a (thread, stream)
    /// allocates the cuBLAS workspace (`setWorkspaceForHandle`).
    pub(crate) fn cublas_handle(&self, op: &'static str, dtype: DType) -> Result<()> {
        self.blas_handle(op, dtype)?;
        let (key, size) = {
            let st = self.st.borrow();
            let key = ((st.thread, st.blas_handle), st.stream);
            if st.cublas_ws.iter().any(|(k, _)| *k == key) {
                return Ok(());
            }
            (key, st.profile.cublas_workspace)
        };
        let (_, slot) = self.malloc(size, op, Category::Workspace)?;
        self.st.borrow_mut().cublas_ws.push((key, slot));
        Ok(())
    }

    /// The thread's cuBLAS handle (`getCurrentCUDABlasHandle`), created on
    /// its first use: the driver takes device memory outside the allocator
    /// then ([`DeviceProfile::blas_handle_bytes`]), noted in the event log.
    /// When the device has less free, `cublasCreate` fails: reported as
    /// running out of memory (PyTorch raises a `RuntimeError`,
    /// `CUBLAS_STATUS_ALLOC_FAILED`).
    fn blas_handle(&self, op: &'static str, dtype: DType) -> Result<()> {
        let handle = {
            let st = self.st.borrow();
            let BlasHandleBytes { first, later } = st.profile.blas_handle_bytes;
            let owner = (st.thread, st.blas_handle);
            (!st.blas_handles.contains(&owner)).then_some(if st.blas_handles.is_empty() {
                first.saturating_sub(st.blas_prepaid)
            } else {
                later
            })
        };
        if let Some(bytes) = handle {
            {
                // `cublasCreate`: the process's first reserves address space
                // (a no-op after that, or on a device started after it)
                let mut st = self.st.borrow_mut();
                if st.alloc.device_mut().first_cublas() {
                    if let Some(log) = st.log.as_mut() {
                        log.first_cublas = Some(log.events.len());
                    }
                }
            }
            self.driver_take(op, bytes)?;
            let mut st = self.st.borrow_mut();
            let owner = (st.thread, st.blas_handle);
            st.blas_handles.push(owner);
        }
        if dtype != DType::F32 {
            self.kernels16(op)?;
        }
        Ok(())
    }

    /// The share of a thread's 16-bit kernels
    /// ([`DeviceProfile::blas_16bit_bytes`]), taken once per thread: at its
    /// first 16-bit matmul, or at its first cuDNN convolution whatever the
    /// dtype. The second is a fit to measurements of ViT, not the mechanism
    /// (lazily loaded kernel modules; `fixtures/driver_share/README.md`).
    pub(crate) fn kernels16(&self, op: &'static str) -> Result<()> {
        let bytes = {
            let st = self.st.borrow();
            (!st.blas_16bit.contains(&(st.thread, st.blas_handle)))
                .then_some(st.profile.blas_16bit_bytes)
        };
        if let Some(bytes) = bytes {
            self.driver_take(op, bytes)?;
            let pending = {
                let mut st = self.st.borrow_mut();
                let thread = st.thread;
                let owner = (thread, st.blas_handle);
                st.blas_16bit.push(owner);
                if owner == (Thread::Autograd, 0) {
                    std::mem::take(&mut st.autograd_16bit_pending)
                } else {
                    Vec::new()
                }
            };
            for (op, bytes) in pending {
                self.driver_take(op, bytes)?;
            }
        }
        Ok(())
    }

    /// Device memory outside the allocator for `op` that comes with the
    /// autograd thread's 16-bit share ([`Self::kernels16`]): taken now if
    /// that thread has taken its share, else when it does (never, if it
    /// runs no 16-bit kernel).
    pub fn driver_outside_with_autograd_16bit(&self, op: &'static str, bytes: u64) -> Result<()> {
        let now = self.st.borrow().blas_16bit.contains(&(Thread::Autograd, 0));
        if now {
            return self.driver_take(op, bytes);
        }
        self.st
            .borrow_mut()
            .autograd_16bit_pending
            .push((op, bytes));
        Ok(())
    }

    /// The driver takes `bytes` for this thread's cuBLAS or cuDNN use, noted
    /// in the event log; out of memory when the device has less free, with
    /// the error the library raises (`op` names the cuDNN ones).
    /// Device memory a library takes through the driver, outside the
    /// caching allocator (NCCL's buffers), for `op`: counted against the
    /// device as the cuBLAS handles are, and noted in the event log.
    pub fn driver_outside(&self, op: &'static str, bytes: u64) -> Result<()> {
        self.driver_take(op, bytes)
    }

    /// The device's first side stream (`torch.cuda.Stream()`, any
    /// priority): `getStreamFromPool`'s first call makes the device's stream
    /// pools (CUDAStream.cpp `initDeviceStreamState`), which hold 70 MiB
    /// beyond the allocator on the H100 under either backend; under
    /// `cudaMallocAsync` they are the memory its first allocation takes
    /// (`lazy_init_device` calls `getStreamFromPool`), one charge whichever
    /// comes first (fixtures/run/probes/mx2_stream_pool_probe_s61_h100.txt).
    pub fn stream_pools(&self) -> Result<()> {
        if std::mem::replace(&mut self.st.borrow_mut().stream_pools, true) {
            return Ok(());
        }
        if self.st.borrow_mut().alloc.stream_pools_async() {
            return Ok(());
        }
        self.driver_take("stream_pools", vramscope_alloc::STREAM_POOLS_BYTES)
    }

    /// `cudaFree` of `bytes` taken with [`Self::driver_outside`]: the
    /// device's free memory grows by them again. Not in the event log,
    /// whose driver takes the estimate replays (which frees none).
    pub fn driver_outside_free(&self, bytes: u64) {
        self.st.borrow_mut().alloc.device_mut().driver_free(bytes);
    }

    /// Device memory taken outside the allocator for `op` that the
    /// process's first cuBLAS handle would otherwise take (kernel modules
    /// both load): that handle takes `bytes` less when it comes.
    pub fn driver_outside_ahead_of_blas(&self, op: &'static str, bytes: u64) -> Result<()> {
        self.driver_take(op, bytes)?;
        self.st.borrow_mut().blas_prepaid += bytes;
        Ok(())
    }

    /// Note a size the twin takes without a measurement behind it (the
    /// estimate's `unmeasured`).
    pub fn note_unmeasured_size(&self, what: String) {
        self.note_unmeasured(what);
    }

    fn driver_take(&self, op: &'static str, bytes: u64) -> Result<()> {
        let mut st = self.st.borrow_mut();
        if !st.alloc.device_mut().driver_alloc(bytes) {
            let (free, _) = vramscope_alloc::Device::mem_info(st.alloc.device());
            st.note_oom();
            return Err(EngineError::OutOfMemory {
                op,
                bytes,
                detail: if op.starts_with("nccl") {
                    format!(
                        "NCCL error: unhandled cuda error (out of memory): NCCL needs {} for \
                         its buffers and {} is free (the caching allocator keeps its cache)",
                        vramscope_alloc::format_size(bytes),
                        vramscope_alloc::format_size(free)
                    )
                } else if op == "stream_pools" {
                    // CUDAStream.cpp `initDeviceStreamState`: C10_CUDA_CHECK of the streams' creation
                    format!(
                        "CUDA error: out of memory: the device's stream pools need {} and {} is \
                         free (the caching allocator keeps its cache)",
                        vramscope_alloc::format_size(bytes),
                        vramscope_alloc::format_size(free)
                    )
                } else if op == "aoti_constant_blob" {
                    // model_base.h `RAII_gpuMalloc`: AOTI_RUNTIME_CUDA_CHECK(cudaMalloc(...))
                    format!(
                        "CUDA error: out of memory: AOTInductor's constants need {} and {} is \
                         free (the caching allocator keeps its cache)",
                        vramscope_alloc::format_size(bytes),
                        vramscope_alloc::format_size(free)
                    )
                } else if op.starts_with("cudnn_") {
                    // as the GPU failed at ViT's batch 3724 on the whole card
                    // (`fixtures/plan/wholecard_vit_plan_h100.jsonl`)
                    format!(
                        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR: the driver needs {} for \
                         this thread's kernels and {} is free (the caching allocator keeps \
                         its cache)",
                        vramscope_alloc::format_size(bytes),
                        vramscope_alloc::format_size(free)
                    )
                } else {
                    format!(
                        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling \
                         `cublasCreate(handle)`: the driver needs {} for this thread's cuBLAS \
                         use and {} is free (the caching allocator keeps its cache)",
                        vramscope_alloc::format_size(bytes),
                        vramscope_alloc::format_size(free)
                    )
                },
            });
        }
        if let Some(log) = st.log.as_mut() {
            let at = log.events.len();
            log.driver.push(At { at, what: bytes });
        }
        Ok(())
    }

    /// The process's first kernels are next: the CUDA context gives back
    /// the address range it held (`vramscope_alloc`'s `driver_va.rs`, rule
    /// 6), noted in the event log for replays. Where the whole range goes
    /// back, it goes at the first op's launch, after that op's allocation:
    /// so after the next `Runtime::malloc`; where it becomes a hole of the
    /// context's chunk (a segment at B-2), at once (measured:
    /// `docs/driver-placement.md`). A no-op but for a
    /// [`RuntimeConfig::fresh_process`] runtime, once.
    pub fn first_kernels(&self) {
        let mut st = self.st.borrow_mut();
        if st.alloc.device().releases_whole() {
            st.first_kernels_pending = true;
            return;
        }
        if st.alloc.device_mut().first_kernels() {
            if let Some(log) = st.log.as_mut() {
                log.first_kernels = Some(log.events.len());
            }
        }
    }

    /// The process's first kernel has just launched, after its op's own
    /// allocations: the CUDA context gives back the range it held now
    /// (`driver_va.rs`, rule 6), whether whole or as a hole of its chunk.
    /// For a front door that sees each op's allocations before noting its
    /// launch (a captured program); a no-op after the first time.
    pub fn kernels_launched(&self) {
        let mut st = self.st.borrow_mut();
        st.first_kernels_pending = false;
        if st.alloc.device_mut().first_kernels() {
            if let Some(log) = st.log.as_mut() {
                log.first_kernels = Some(log.events.len());
            }
        }
    }

    /// `getCUDABlasLtWorkspace()` as `gemm_and_bias` calls it: the handle
    /// first (which may allocate the cuBLAS workspace), then the separate
    /// cuBLASLt workspace on first use per (thread, stream).
    pub(crate) fn cublaslt_workspace(&self, op: &'static str, dtype: DType) -> Result<()> {
        self.cublas_handle(op, dtype)?;
        let (key, size) = {
            let st = self.st.borrow();
            let key = ((st.thread, st.blas_handle), st.stream);
            if st.lt_ws.iter().any(|(k, _)| *k == key) {
                return Ok(());
            }
            (key, st.profile.cublaslt_workspace)
        };
        let (_, slot) = self.malloc(size, op, Category::Workspace)?;
        self.st.borrow_mut().lt_ws.push((key, slot));
        Ok(())
    }

    // ---- global modes -----------------------------------------------------------

    /// `torch.is_grad_enabled()`.
    pub fn is_grad_enabled(&self) -> bool {
        self.st.borrow().grad_enabled
    }

    /// `torch.set_grad_enabled(mode)`; returns the previous mode.
    pub fn set_grad_enabled(&self, mode: bool) -> bool {
        std::mem::replace(&mut self.st.borrow_mut().grad_enabled, mode)
    }

    /// Run `f` under `torch.no_grad()`.
    pub fn no_grad<T>(&self, f: impl FnOnce() -> T) -> T {
        let prev = self.set_grad_enabled(false);
        let out = f();
        self.set_grad_enabled(prev);
        out
    }

    /// Run `f` under `torch.inference_mode()` (no autograd recording, no
    /// version counter bumps; memory-wise the same as `no_grad`).
    pub fn inference_mode<T>(&self, f: impl FnOnce() -> T) -> T {
        let prev_g = self.set_grad_enabled(false);
        let prev_i = std::mem::replace(&mut self.st.borrow_mut().inference_mode, true);
        let out = f();
        self.st.borrow_mut().inference_mode = prev_i;
        self.set_grad_enabled(prev_g);
        out
    }

    /// Run `f` with every allocation attributed to module `name` (nested).
    pub fn in_module<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        {
            let mut st = self.st.borrow_mut();
            let path: Rc<str> = match st.modules.last() {
                Some(p) if !p.is_empty() => Rc::from(format!("{p}.{name}")),
                _ => Rc::from(name),
            };
            st.modules.push(path);
        }
        let out = f();
        self.st.borrow_mut().modules.pop();
        out
    }

    /// Run `f` with every allocation it makes filed under `category`.
    pub fn with_category<T>(&self, category: Category, f: impl FnOnce() -> T) -> T {
        let prev = self.st.borrow_mut().category.replace(category);
        let out = f();
        self.st.borrow_mut().category = prev;
        out
    }

    pub(crate) fn on_thread<T>(&self, thread: Thread, f: impl FnOnce() -> T) -> T {
        let prev = std::mem::replace(&mut self.st.borrow_mut().thread, thread);
        let out = f();
        self.st.borrow_mut().thread = prev;
        out
    }

    /// `at::sequence_number::get_and_increment()` of the current thread.
    pub(crate) fn next_seq(&self) -> u64 {
        let mut st = self.st.borrow_mut();
        let t = st.thread as usize;
        let s = st.seq[t];
        st.seq[t] += 1;
        s
    }

    pub(crate) fn count_op(&self) {
        self.st.borrow_mut().ops += 1;
    }

    /// Number of ops simulated so far.
    pub fn ops_simulated(&self) -> u64 {
        self.st.borrow().ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Driver address-space rule 16 (`validation/va_pinned`'s `gg01` and
    /// `small` cases on the H200): blocks of 2 MiB or less share the
    /// driver's 2 MiB buffers, the first two of which go into the pool's
    /// top, not laid out, the third and later among the segments; a larger
    /// block is mapped there itself and can be freed.
    #[test]
    fn small_pinned_blocks_share_buffers_and_the_pool_s_top_holds_two() {
        let rt = Runtime::new(RuntimeConfig {
            fresh_process: true,
            ..RuntimeConfig::default()
        });
        rt.start_event_log();
        // a 16 and an 8 KiB block in one buffer, a 2 MiB one in a second
        assert_eq!(rt.pinned_alloc(16 << 10), None);
        assert_eq!(rt.pinned_alloc(8 << 10), None);
        assert_eq!(rt.pinned_alloc(2 << 20), None);
        // the third buffer is laid out
        assert_eq!(rt.pinned_alloc(2 << 20), None);
        let big = rt.pinned_alloc(4 << 20).unwrap();
        rt.pinned_free(big);
        let log = rt.take_event_log().unwrap();
        let pinned: Vec<u64> = log
            .host
            .iter()
            .filter_map(|e| match e.what {
                HostEvent::Pinned(_, len) => Some(len),
                _ => None,
            })
            .collect();
        assert_eq!(pinned, vec![2 << 20, 4 << 20]);
        assert!(matches!(log.host.last().unwrap().what, HostEvent::Unmap(a) if a == big));
    }

    /// cuDNN's libraries load once each, in order, however often the
    /// attention asks; none in a process started after its first kernels.
    #[test]
    fn cudnn_libraries_load_once_in_order_in_a_fresh_process() {
        // the libraries' spans, and the driver's mappings as their lengths
        // negated (the first handle's, `cudnn_handle_driver`)
        let spans = |rt: &Runtime| -> Vec<i64> {
            let log = rt.take_event_log().unwrap();
            log.host
                .iter()
                .map(|e| match e.what {
                    HostEvent::Library(_, span) => span as i64,
                    HostEvent::Driver(_, len) => -(len as i64),
                    _ => 0,
                })
                .collect()
        };
        let libs = |r: std::ops::Range<usize>| -> Vec<i64> {
            CUDNN_LIBRARY_SPANS[r].iter().map(|&s| s as i64).collect()
        };
        let rt = Runtime::new(RuntimeConfig {
            fresh_process: true,
            ..RuntimeConfig::default()
        });
        rt.start_event_log();
        rt.sdpa_backend_choice();
        rt.sdpa_backend_choice();
        assert_eq!(spans(&rt), libs(0..1));
        rt.start_event_log();
        rt.cudnn_plan();
        rt.sdpa_backend_choice();
        rt.cudnn_plan();
        // the plan makes the first handle: the driver's 6 MiB (no kernel
        // has run) and 2 MiB page-locked buffer, then the engines
        let mut want = vec![-(6 << 20), -(2 << 20)];
        want.extend(libs(1..4));
        assert_eq!(spans(&rt), want);
        // after a plan's handle, an RNN call loads `ops` and `adv` alone
        // (the probe's `after_conv`)
        rt.start_event_log();
        rt.cudnn_rnn(false);
        rt.cudnn_rnn(false);
        assert_eq!(spans(&rt), libs(4..CUDNN_LIBRARY_SPANS.len()));
        // straight to the engines: all four, the graph first (the driver's
        // mappings after it)
        let rt = Runtime::new(RuntimeConfig {
            fresh_process: true,
            ..RuntimeConfig::default()
        });
        rt.start_event_log();
        rt.cudnn_plan();
        let mut want = libs(0..1);
        want.extend([-(6 << 20), -(2 << 20)]);
        want.extend(libs(1..4));
        assert_eq!(spans(&rt), want);
        let rt = Runtime::new(RuntimeConfig::default());
        rt.start_event_log();
        rt.cudnn_plan();
        rt.cudnn_rnn(false);
        assert!(spans(&rt).is_empty());
    }

    /// An LSTM's `flatten_parameters` as the process's first cuDNN call and
    /// first kernel, after an `empty` at B-2 and its 12 MiB of weights at
    /// B+72: where the driver's mappings, cuDNN's libraries and the flat
    /// weights go, each offset in MiB from B (`None`: the ptxjit library's
    /// end), and the next 2 MiB segment once an 80 MiB one went into the
    /// context's range (blind298/km03's order).
    fn first_rnn_call(cold: bool) -> (Vec<(f64, u64)>, f64, f64) {
        let rt = Runtime::new(RuntimeConfig {
            fresh_process: true,
            ..RuntimeConfig::default()
        });
        rt.start_event_log();
        let mib = |n: u64| n * 1024 * 1024;
        let malloc = |n: u64| rt.malloc(n, "test", Category::Output).unwrap().0;
        let b = malloc(512) + mib(2);
        let off = |a: u64| (a as i64 - b as i64) as f64 / mib(1) as f64;
        // the weights of both directions (2, 4, 2 and 4 MiB) in one 20 MiB segment
        assert_eq!(off(malloc(mib(2))), 72.0);
        for n in [4, 2, 4] {
            malloc(mib(n));
        }
        rt.cudnn_rnn(cold);
        // the flat weights' `zeros` (LSTM(256, 512, bidirectional=True)),
        // the first kernel
        let flat = off(malloc(12_615_680));
        rt.first_launch();
        rt.kernels_launched();
        rt.cudnn_rnn(cold);
        assert_eq!(off(malloc(mib(80))), -416.0);
        // (small-pool segments: 2 MiB for a request of 1 MiB or less; the
        // first still fits in B-2's)
        malloc(mib(1));
        let next = off(malloc(mib(1)));
        let log = rt.take_event_log().unwrap();
        let host = log
            .host
            .iter()
            .map(|e| match e.what {
                HostEvent::Library(a, n) | HostEvent::Driver(a, n) => (off(a), n),
                HostEvent::Map(a, n) => (off(a + n), n),
                _ => (f64::NAN, 0),
            })
            .collect();
        (host, flat, next)
    }

    /// Rule 18 as the H100's maps show it. km03's of session 68
    /// (`/work/notes/hist68/km03_va.maps.json.xz`, op 90; the JIT cache held
    /// the kernels): the driver's 6 MiB at B-448, its buffer at B-442, the
    /// flat weights at B-440, `ops` at B-490, `adv` at B-600, the pool at
    /// B-1120. km67's probe, `plain`
    /// (`fixtures/run/probes/km67_lstm_flatten_first_cudnn_placement_probe_h100.txt`;
    /// a cold cache): the ptxjit library ending at the context's B-416, the
    /// driver's chunk under it at B-512 with the buffer at B-506, the flat
    /// weights at B-504, `ops` at B-554, `adv` at B-664, the pool at B-1184;
    /// and blind298/km03's next 2 MiB segments in that chunk at B-488 (its
    /// history of session 67; B-490 is rule 6's 2 MiB). The graph library
    /// goes above the context in both (not laid out).
    #[test]
    fn an_rnn_s_first_cudnn_call_maps_what_the_h100_maps() {
        let (host, flat, next) = first_rnn_call(false);
        assert_eq!(flat, -440.0);
        // (B-426 is rule 6's 2 MiB; the H100 put this one in the pool's top,
        // not laid out)
        assert_eq!(next, -424.0);
        assert_eq!(
            host,
            vec![
                (-448.0, CUDNN_RNN_DRIVER_FIRST),
                (-442.0, PINNED_BUFFER),
                (-490.0, CUDNN_LIBRARY_SPANS[4]),
                (-600.0, CUDNN_LIBRARY_SPANS[5]),
            ]
        );
        let (host, flat, next) = first_rnn_call(true);
        assert_eq!(flat, -504.0);
        assert_eq!(next, -488.0);
        assert_eq!(
            host,
            vec![
                (-416.0, PTXJIT_SPAN),
                (-512.0, CUDNN_RNN_DRIVER_FIRST),
                (-506.0, PINNED_BUFFER),
                (-554.0, CUDNN_LIBRARY_SPANS[4]),
                (-664.0, CUDNN_LIBRARY_SPANS[5]),
            ]
        );
    }

    /// Settings changed at run time reach the allocator: the next segment
    /// is expandable, and a bad string is PyTorch's error.
    #[test]
    fn allocator_settings_change_at_run_time() {
        let rt = Runtime::new(RuntimeConfig::default());
        let alloc = |rt: &Runtime| {
            rt.malloc_on(30 << 20, 0, Category::Output, "empty", "".into(), "".into())
                .unwrap()
        };
        alloc(&rt);
        rt.set_allocator_settings("expandable_segments:True")
            .unwrap();
        assert!(rt.allocator_config().expandable_segments);
        alloc(&rt);
        let expandable: Vec<bool> = rt.segments().iter().map(|s| s.is_expandable).collect();
        assert_eq!(
            expandable.iter().filter(|&&e| e).count(),
            1,
            "{expandable:?}"
        );
        let e = rt
            .set_allocator_settings("expandable_segments:yes")
            .unwrap_err();
        assert_eq!(e.kind, vramscope_alloc::ConfigErrorKind::Value);
    }
}
