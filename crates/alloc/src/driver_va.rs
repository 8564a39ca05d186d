//! Where the CUDA driver puts the segments `cudaMalloc` returns: the virtual
//! address rules read off the H100 and H200 traces (driver 580.159). The
//! evidence for each rule, what it leaves out and how to regenerate it are in
//! `docs/driver-placement.md`.
//!
//! The caching allocator breaks ties between equal-size free blocks by
//! address (`BlockComparatorSize`: size, stream, pointer), so which of two
//! segments is lower decides which block is reused. The driver does not hand
//! out increasing addresses. B is the context's anchor (64 MiB aligned).
//!
//! The address space:
//! 1. **New chunks, 32 MiB granular, top-down.** A `cudaMalloc` that fits in
//!    no hole gets a new chunk of its size rounded up to 32 MiB, at the
//!    highest 32 MiB aligned address directly below the lowest chunk or
//!    mapping; the segment is at the chunk's start, the rest is a hole.
//! 2. **Holes: newest chunk first, best fit inside it.** A `cudaMalloc` that
//!    fits in a hole goes to the most recently created chunk that has one,
//!    and there to the smallest hole that fits (the lowest of equal ones), at
//!    its low end.
//! 3. **Released chunks.** A chunk whose segments are all freed is released;
//!    a new chunk goes to the highest 32 MiB aligned address with room in
//!    the highest released range at least [`GAP_SLACK`] larger than it, else
//!    by rule 1.
//!
//! The process around it:
//! 4. **The context** ([`DriverVa::new`]). A fresh process's context holds
//!    B-416..B+96 MiB but for two holes, 2 MiB at B-2 and 24 MiB at B+72.
//! 5. **After the first cuBLAS call** ([`DriverVa::after_cublas`], the state
//!    [`crate::SimDevice::new`] starts in): B-416..B is one hole of the
//!    context's chunk.
//! 6. **The first kernels** ([`DriverVa::first_launch`],
//!    [`DriverVa::release_context`]). At the first kernel the driver takes
//!    2 MiB by rule 2. The context gives B-416..B-2 back at the first kernel
//!    that is not a random-number, cuDNN or cuBLASLt one (measured): where
//!    a segment lies at B-2 the range becomes a chunk of its own, next
//!    after the context's in age (blind101/cw04), else all of B-416..B is
//!    released (rule 3).
//! 7. **CPU tensors** ([`DriverVa::host_map`]). glibc maps a CPU tensor above
//!    its threshold (`crate::HostHeap`) on its own, as Linux's top-down
//!    `mmap` places it: at the top of the highest free range it fits in, else
//!    directly below the lowest chunk or mapping, unaligned. Unmapping
//!    releases the range as rule 3 does.
//! 8. **The first cuBLAS handle** ([`DriverVa::first_cublas`]). The driver
//!    reserves [`CUBLAS_RESERVATION`] placed as a segment is (rules 2, 1, 3),
//!    then takes 2 MiB by rule 2. Address space only.
//! 9. **cuDNN's libraries** ([`DriverVa::library`]). glibc 2.35's loader
//!    (`_dl_map_segment`) maps a library whose segments are 2 MiB aligned as
//!    `mmap(span + 2 MiB - 4 KiB)`, top-down as in rule 7, and keeps the
//!    2 MiB aligned span. Never unmapped.
//! 10. **`libtriton.so`** (`SimDevice::map_library`). The first import of
//!    `torch._dynamo` (an optimizer's construction makes one) loads it:
//!    page aligned, one mapping of its span placed as rule 7 places host
//!    memory. Never unmapped.
//! 11. **CPU tensors made before the context** ([`DriverVa::host_map_above`]).
//!    A model built on the host is mapped by rule 7 before the context
//!    exists; the context's creation then maps below the lowest of them, so
//!    they lie above it, the lowest at B + [`HOST_ABOVE_ANCHOR`] (measured).
//!    Freed, their ranges take chunks by rule 3.
//! 12. **Kernel modules' host memory** (`SimDevice::map_library`). A kernel
//!    module's lazy load `malloc`s host buffers libcuda never frees; those
//!    glibc maps (`crate::HostHeap::malloc_plain`) are placed as rule 7
//!    places host memory (the engine's `Runtime::kernel_module`).
//! 14. **The driver's pool** ([`DriverVa::release_context`]). At the op
//!    where the context gives its range back (rule 6) the driver reserves
//!    [`DRIVER_POOL`] of address space, placed as a chunk is (rules 3,
//!    then 1), never given back: below the lowest chunk, unless a released
//!    range has room for it (a host-built model's freed tensors, rule 11).
//!    (Rule 13, expandable segments' reservations, is `crate::SimDevice`'s.)
//! 15. **A thread's stack and malloc arena** ([`DriverVa::thread`]). glibc
//!    maps a new thread's stack as host memory (rule 7); the thread's first
//!    `malloc` makes its arena (`malloc/arena.c`'s `new_heap`): a
//!    `PROT_NONE` mapping of twice [`THREAD_HEAP`], placed as host memory
//!    is, of which the [`THREAD_HEAP`] aligned part at or above its start is
//!    kept and the rest given back. Both for good.
//! 16. **Page-locked host memory** (`crate::SimDevice::pinned_map`).
//!    `cudaHostAlloc` of more than 2 MiB maps the block among the segments,
//!    placed as a segment of its length rounded up to 2 MiB is (rules 2, 1,
//!    3: [`DriverVa::malloc`]); `cudaFreeHost` frees it as `cudaFree` does.
//!    Blocks of 2 MiB or less share the driver's 2 MiB buffers, the first
//!    two in its pool's top (rule 14, not laid out), later ones mapped as
//!    2 MiB blocks (the engine's `Runtime::pinned_alloc`). Measured:
//!    `validation/va_pinned`.
//!
//! Rules 1 to 3 are Linux's top-down `mmap` seen from the segments alone: a
//! chunk is a `PROT_NONE` mapping of the process (`validation/va_maps.py`,
//! `fixtures/va_maps`).

use crate::inthash::FastMap;

const MIB: u64 = 1024 * 1024;
/// VA chunk granularity (rule 1).
const CHUNK: u64 = 32 * MIB;
/// A released range takes a chunk only if it is this much larger (rule 3).
const GAP_SLACK: u64 = 32 * MIB;
/// Physical page granularity of `cudaMalloc`.
const PAGE: u64 = 2 * MIB;
/// The address space the first `cublasCreate` reserves (rule 8): measured
/// (`validation/va_pool`, `validation/va_check.py rule`).
const CUBLAS_RESERVATION: u64 = 64 * MIB;
/// The address space the driver reserves for its pool at the first kernels
/// that give the context's range back (rule 14): a 504 MiB `PROT_NONE`
/// mapping beside its top 8 MiB in the process's maps (`validation/va_pool`,
/// `docs/driver-placement.md`, session 10).
const DRIVER_POOL: u64 = 512 * MIB;
/// The pool's top (rule 14): 8 MiB that act as a chunk of their own beside
/// the pool's 504 MiB `PROT_NONE` mapping, a 2 MiB page-locked buffer of the
/// driver's at their low end (session 21's H200 maps: in all 8 processes);
/// 2 MiB segments go into the other 6 (blind68/bp02, blind303/kr04's H100
/// maps and history: `mw78_kr04_assert_buffer_probe_h100.out`).
const POOL_TOP: u64 = 8 * MIB;
/// The x86-64 page: the loader's `mmap` is this much short of the span plus
/// the alignment (rule 9).
const HOST_PAGE: u64 = 4096;
/// Rule 11: where the lowest CPU tensor mapped before the CUDA context lies,
/// above the anchor B: the median, to the MiB, of 12 processes of
/// host-built models on the H200 (245.7 MiB; `docs/driver-placement.md`,
/// session 13). Between lie the context's own mappings up to B+128, a
/// driver thread's 64 MiB aligned malloc arena, its thread stack, NVML and
/// the mappings of torch's CUDA initialisation.
const HOST_ABOVE_ANCHOR: u64 = 246 * MIB;
/// glibc's `HEAP_MAX_SIZE` on x86-64 (`2 * DEFAULT_MMAP_THRESHOLD_MAX`,
/// `malloc/arena.c`): a thread arena's heap, aligned to its size.
const THREAD_HEAP: u64 = 64 * MIB;

#[derive(Debug, Clone)]
struct Chunk {
    lo: u64,
    hi: u64,
    /// Live segments (address, size rounded to 2 MiB pages), by address;
    /// empty once the chunk is released.
    segs: Vec<(u64, u64)>,
}

impl Chunk {
    /// The holes of the chunk, `(start, len)`, in address order.
    fn holes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut at = self.lo;
        let mut ends = self
            .segs
            .iter()
            .map(|&(a, s)| (a, a + s))
            .chain(std::iter::once((self.hi, self.hi)));
        std::iter::from_fn(move || loop {
            let (a, end) = ends.next()?;
            let hole = (at, a.saturating_sub(at));
            at = at.max(end);
            if hole.1 > 0 {
                return Some(hole);
            }
        })
    }

    fn largest_hole(&self) -> u64 {
        self.holes().map(|h| h.1).max().unwrap_or(0)
    }
}

/// The driver's virtual address space for `cudaMalloc`'d segments.
///
/// Chunks are kept in creation order (a released one stays, empty, with no
/// hole), with a max tree over their largest holes, so that rule 2's search
/// for the newest chunk with a hole that fits is a descent of the tree
/// rather than a walk of every chunk: a training step maps hundreds of
/// segments, most of them into new chunks.
#[derive(Debug, Clone)]
pub(crate) struct DriverVa {
    chunks: Vec<Chunk>,
    /// A max tree over the chunks' largest holes: leaves at `cap..2 cap`.
    tree: Vec<u64>,
    cap: usize,
    /// The chunk of each live segment, by address: built at the first
    /// free (a run that frees no segment, as most replays, never needs it).
    chunk_of: Option<FastMap<u64, u32>>,
    /// The low ends of the chunks not released, in decreasing order: a new
    /// chunk most often goes below the lowest, to the end.
    los: Vec<u64>,
    /// Released ranges, sorted, merged.
    released: Vec<(u64, u64)>,
    /// Buffers of a run before [`Self::reset`], reused: the
    /// chunks' segment lists (emptied) and the address map (cleared).
    spare_segs: Vec<Vec<(u64, u64)>>,
    spare_map: Option<FastMap<u64, u32>>,
    /// The context still holds B-416..B-2 (a fresh process before its first
    /// kernels, rule 4), with its anchor B; see [`Self::release_context`].
    held: Option<u64>,
    /// The process has not created its first cuBLAS handle yet (a fresh
    /// process); see [`Self::first_cublas`].
    cublas_pending: bool,
    /// The process has not launched its first kernel yet (a fresh process);
    /// see [`Self::first_launch`].
    launch_pending: bool,
    /// The pool's top is laid out ([`Self::lay_out_pool_top`]).
    pool_top: bool,
    /// The driver's pool's chunk (rule 14), by index in `chunks`, once
    /// reserved ([`Self::pool_top_first`]).
    pool_at: Option<usize>,
}

impl DriverVa {
    /// A fresh process whose context's range ends at `anchor` + 96 MiB
    /// (rule 4); `anchor` is 64 MiB aligned and well above 0.
    pub(crate) fn new(anchor: u64) -> Self {
        Self::with_context(anchor, true)
    }

    /// The same process once its first cuBLAS call has run (rule 5): the
    /// context's range B-416..B is free.
    pub(crate) fn after_cublas(anchor: u64) -> Self {
        Self::with_context(anchor, false)
    }

    /// How far the context's chunk reaches above the anchor (rule 4): no
    /// address the rule hands out lies at or above `anchor` + this.
    pub(crate) const CONTEXT_ABOVE_ANCHOR: u64 = 96 * MIB;

    fn with_context(anchor: u64, fresh: bool) -> Self {
        let mut va = Self::empty();
        va.push_context(anchor, fresh);
        va
    }

    /// An address space without even the context's chunk (a placeholder
    /// while [`Self::reset`] renews one).
    pub(crate) fn empty() -> Self {
        Self {
            chunks: Vec::new(),
            tree: Vec::new(),
            cap: 0,
            chunk_of: None,
            los: Vec::new(),
            released: Vec::new(),
            spare_segs: Vec::new(),
            spare_map: None,
            held: None,
            cublas_pending: false,
            launch_pending: false,
            pool_top: false,
            pool_at: None,
        }
    }

    /// Become [`Self::new`]`(anchor)` (`fresh`) or
    /// [`Self::after_cublas`]`(anchor)`, keeping the buffers this one grew
    /// (a sweep replays hundreds of runs, each mapping hundreds of chunks).
    pub(crate) fn reset(&mut self, anchor: u64, fresh: bool) {
        for c in self.chunks.drain(..) {
            let mut segs = c.segs;
            segs.clear();
            self.spare_segs.push(segs);
        }
        self.tree.clear();
        self.cap = 0;
        if let Some(mut map) = self.chunk_of.take() {
            map.clear();
            self.spare_map = Some(map);
        }
        self.los.clear();
        self.released.clear();
        self.pool_at = None;
        self.push_context(anchor, fresh);
    }

    /// Rule 6: the process's first kernels have run; the context gives back
    /// the range it held (B-416..B-2). Where a segment lies at B-2 (the
    /// fresh context's small hole) the range becomes a chunk of its own,
    /// next after the context's in age (so rule 2 fills it, from its low
    /// end, before the context's B+72..B+96 hole: blind101/cw04's H200
    /// history and probes; and after the chunks made since, as
    /// validation/run/07 on the H100 has it); else the whole of
    /// B-416..B is released, and chunks go into it from its top (rule 3).
    /// Then the driver reserves its pool (rule 14, [`Self::reserve_pool`]).
    /// A no-op once released, or after [`Self::after_cublas`]; `true` when
    /// it gave the range back.
    pub(crate) fn release_context(&mut self) -> bool {
        self.first_launch();
        let Some(anchor) = self.held.take() else {
            return false;
        };
        let lo = anchor - 416 * MIB;
        // the context's chunk is the first (`push_context` on an empty space)
        let context = &mut self.chunks[0];
        context.segs.retain(|&(a, _)| a != lo);
        if let Some(map) = &mut self.chunk_of {
            map.remove(&lo);
        }
        // (B-2 as the driver's 2 MiB left it: in a process with no other
        // hole, that is where it goes)
        let kept = context.segs.iter().any(|&(a, _)| a == anchor - PAGE);
        // the context's chunk now starts at B (released range) or at B-2
        // (its segment there); every other chunk lies below B-416 or above
        // B+96 (host memory mapped before the context): the order holds
        let new_lo = if kept { anchor - PAGE } else { anchor };
        context.lo = new_lo;
        let found = self.los.binary_search_by(|x| lo.cmp(x));
        debug_assert!(found.is_ok(), "the context's low end not kept");
        if let Ok(k) = found {
            self.los[k] = new_lo;
        }
        self.update(0);
        if kept {
            // a chunk of its own, next after the context's in age: rule 2
            // takes its hole before the context's B+72..B+96 one, and after
            // those of the chunks made since the context
            let segs = self.spare_segs.pop().unwrap_or_default();
            self.push_chunk(Chunk {
                lo,
                hi: anchor - PAGE,
                segs,
            });
            let last = self.chunks.len() - 1;
            self.chunks[1..].rotate_right(1);
            debug_assert_eq!(self.chunks[1].lo, lo, "the range not second");
            if let Some(map) = &mut self.chunk_of {
                for (k, c) in self.chunks.iter().enumerate().skip(1) {
                    for &(a, _) in &c.segs {
                        map.insert(a, k as u32);
                    }
                }
            }
            for k in 1..=last {
                self.update(k);
            }
        } else {
            self.add_released(lo, anchor);
        }
        self.reserve_pool();
        true
    }

    /// Rule 14: the driver's pool, [`DRIVER_POOL`] of address space placed
    /// as a chunk is (rule 3, else rule 1) and never given back; no segment
    /// goes into it but into its top where laid out
    /// ([`Self::lay_out_pool_top`]). Where the highest released range with room is a
    /// host-built model's freed tensors (rule 11), the next chunks go below
    /// the pool (blind64/bl01's H200 history: its first forward's 24 MiB
    /// chunk 512 MiB under that range's top).
    fn reserve_pool(&mut self) {
        if let Some(lo) = self.place_chunk(DRIVER_POOL) {
            let mut segs = self.spare_segs.pop().unwrap_or_default();
            if self.pool_top {
                // its top 8 MiB a hole but for the driver's 2 MiB buffer at
                // their low end: the newest chunk, so rule 2 fills it first
                let top = lo + DRIVER_POOL - POOL_TOP;
                segs.push((lo, DRIVER_POOL - POOL_TOP));
                segs.push((top, PAGE));
            } else {
                segs.push((lo, DRIVER_POOL));
            }
            self.pool_at = Some(self.chunks.len());
            self.push_chunk(Chunk {
                lo,
                hi: lo + DRIVER_POOL,
                segs,
            });
        }
    }

    /// Whether a piece of `size` that rule 2 places with the pool's top (rule
    /// 14) counted as the chunk made with the pool goes to that top: no chunk
    /// made after the pool has a hole that fits. `true` before the pool
    /// exists (where the driver puts its page-locked buffers then is not laid
    /// out). Rule 16's small page-locked buffers: the va_pinned probes' went
    /// to the pool's top, the newest chunk there; blind352/mq02's first
    /// `.item()` took 2 MiB of the assert buffer's chunk, made after the pool
    /// at the same op (nh79_mq02_first_forward_pieces_probe_h100.out).
    pub(crate) fn pool_top_first(&self, size: u64) -> bool {
        let size = size.next_multiple_of(PAGE).max(PAGE);
        match self.pool_at {
            Some(p) => self.newest_fitting(size).is_none_or(|i| i < p),
            None => true,
        }
    }

    /// Lay out the top 8 MiB of the driver's pool (rule 14) from now on:
    /// a hole of 6 MiB above the driver's 2 MiB page-locked buffer, in the
    /// pool's chunk, which is the newest at the release. A validation trial of
    /// `vramscope run`'s device (`docs/driver-placement.md`); the estimate leaves it out.
    pub(crate) fn lay_out_pool_top(&mut self) {
        self.pool_top = true;
    }

    /// Rule 6: the process's first kernel launches; the driver takes 2 MiB
    /// of its own by rule 2 (no mapping shows it; inferred from where the
    /// pinned buffer lies, `validation/va_pool`). A no-op once done, or
    /// after [`Self::after_cublas`]; [`Self::release_context`] does it first
    /// where it has not been done.
    pub(crate) fn first_launch(&mut self) {
        if std::mem::take(&mut self.launch_pending) {
            let _ = self.malloc(PAGE);
        }
    }

    /// Whether the process's first kernel launch is still to come (rule 6):
    /// `false` after [`Self::first_launch`] or [`Self::after_cublas`].
    pub(crate) fn launch_pending(&self) -> bool {
        self.launch_pending
    }

    /// Whether [`Self::release_context`] would give back the whole range
    /// (no segment at B-2), rather than make it a chunk of its own.
    pub(crate) fn releases_whole(&self) -> bool {
        self.held
            .is_some_and(|anchor| !self.chunks[0].segs.iter().any(|&(a, _)| a == anchor - PAGE))
    }

    /// Rule 8: the process's first cuBLAS handle is created. The driver
    /// reserves 64 MiB of address space, placed as a segment is (rule 2,
    /// else a new chunk; no segment ever lies in it), then takes 2 MiB of
    /// its own. A no-op after [`Self::after_cublas`] or once done; `true`
    /// when it did it.
    pub(crate) fn first_cublas(&mut self) -> bool {
        if !std::mem::take(&mut self.cublas_pending) {
            return false;
        }
        let _ = self.malloc(CUBLAS_RESERVATION);
        let _ = self.malloc(PAGE);
        true
    }

    /// Rule 15: a thread starts and `malloc`s (glibc's `allocate_stack` and
    /// `malloc/arena.c`'s `new_heap`): its `stack` bytes placed as host
    /// memory is (rule 7), then its arena: a `PROT_NONE` mapping of twice
    /// [`THREAD_HEAP`] placed as host memory is, of which the
    /// [`THREAD_HEAP`] aligned part at or above its start is kept and the
    /// rest unmapped (free for chunks). Never unmapped. The arena's address,
    /// or `None` when the address space is exhausted.
    pub(crate) fn thread(&mut self, stack: u64) -> Option<u64> {
        let _ = self.thread_stack(stack)?;
        self.thread_arena()
    }

    /// Rule 15's first half: a thread's `stack` bytes, placed as host
    /// memory is (rule 7), never unmapped; its arena comes at its first
    /// `malloc` ([`Self::thread_arena`]).
    pub(crate) fn thread_stack(&mut self, stack: u64) -> Option<u64> {
        self.host_map(stack)
    }

    /// Rule 15's second half: a thread's first `malloc` makes its glibc
    /// arena, as [`Self::thread`] places it; the arena's address.
    pub(crate) fn thread_arena(&mut self) -> Option<u64> {
        let p1 = self.host_map(2 * THREAD_HEAP)?;
        self.free(p1);
        let p2 = p1.checked_next_multiple_of(THREAD_HEAP)?;
        self.take_released(p2, p2 + THREAD_HEAP);
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((p2, THREAD_HEAP));
        self.push_chunk(Chunk {
            lo: p2,
            hi: p2 + THREAD_HEAP,
            segs,
        });
        Some(p2)
    }

    /// The context's chunk, in an address space that has none yet.
    fn push_context(&mut self, anchor: u64, fresh: bool) {
        self.held = fresh.then_some(anchor);
        self.cublas_pending = fresh;
        self.launch_pending = fresh;
        let lo = anchor - 416 * MIB;
        // What the context holds: all of B-416..B+96 but the two holes of a
        // fresh process, or all of B..B+96 but the upper one after cuBLAS.
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        if fresh {
            segs.push((lo, 414 * MIB));
        }
        segs.push((anchor, 72 * MIB));
        self.push_chunk(Chunk {
            lo,
            hi: anchor + Self::CONTEXT_ABOVE_ANCHOR,
            segs,
        });
    }

    /// Append a chunk (the newest) and index it.
    fn push_chunk(&mut self, c: Chunk) {
        let i = self.chunks.len();
        if i == self.cap {
            // grow the tree: twice the leaves, every node recomputed
            self.cap = (self.cap * 2).max(64);
            let tree = &mut self.tree;
            tree.clear();
            tree.resize(2 * self.cap, 0);
            for (k, c) in self.chunks.iter().enumerate() {
                tree[self.cap + k] = c.largest_hole();
            }
            for n in (1..self.cap).rev() {
                tree[n] = tree[2 * n].max(tree[2 * n + 1]);
            }
        }
        if let Some(map) = &mut self.chunk_of {
            for &(a, _) in &c.segs {
                map.insert(a, i as u32);
            }
        }
        let at = self.los.partition_point(|&x| x > c.lo);
        self.los.insert(at, c.lo);
        self.chunks.push(c);
        self.update(i);
    }

    /// Recompute chunk `i`'s leaf and its ancestors, up to the first that
    /// keeps its value (those above it keep theirs too).
    fn update(&mut self, i: usize) {
        let mut n = self.cap + i;
        let hole = self.chunks[i].largest_hole();
        if self.tree[n] == hole {
            return;
        }
        self.tree[n] = hole;
        while n > 1 {
            n /= 2;
            let m = self.tree[2 * n].max(self.tree[2 * n + 1]);
            if self.tree[n] == m {
                return;
            }
            self.tree[n] = m;
        }
    }

    /// The newest chunk with a hole of at least `size`.
    fn newest_fitting(&self, size: u64) -> Option<usize> {
        if self.tree.get(1).is_none_or(|&m| m < size) {
            return None;
        }
        let mut n = 1;
        while n < self.cap {
            n = if self.tree[2 * n + 1] >= size {
                2 * n + 1
            } else {
                2 * n
            };
        }
        Some(n - self.cap)
    }

    /// `cudaMalloc(size)`: the address (the caller checks capacity), or
    /// `None` if the address space below the chunks is exhausted.
    pub(crate) fn malloc(&mut self, size: u64) -> Option<u64> {
        let size = size.checked_next_multiple_of(PAGE)?.max(PAGE);
        // Rule 2: the newest chunk with a hole that fits; best fit in it,
        // the lowest of equal holes.
        if let Some(i) = self.newest_fitting(size) {
            let c = &mut self.chunks[i];
            let (a, _) = c
                .holes()
                .filter(|&(_, len)| len >= size)
                .min_by_key(|&(a, len)| (len, a))?;
            let at = c.segs.partition_point(|s| s.0 < a);
            c.segs.insert(at, (a, size));
            if let Some(map) = &mut self.chunk_of {
                map.insert(a, i as u32);
            }
            self.update(i);
            return Some(a);
        }
        self.new_chunk(size)
    }

    /// Rules 1 and 3: a new chunk for a segment of `size` (2 MiB pages),
    /// the segment at its start.
    fn new_chunk(&mut self, size: u64) -> Option<u64> {
        let len = size.checked_next_multiple_of(CHUNK)?;
        let lo = self.place_chunk(len)?;
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((lo, size));
        self.push_chunk(Chunk {
            lo,
            hi: lo + len,
            segs,
        });
        Some(lo)
    }

    /// Rules 3 and 1: where a chunk of `len` bytes (a multiple of 32 MiB)
    /// goes, its range taken out of the released ranges; the caller pushes
    /// the chunk.
    fn place_chunk(&mut self, len: u64) -> Option<u64> {
        // at the highest 32 MiB aligned address with room (a host
        // mapping's end is not aligned: rule 7)
        let released = self
            .released
            .iter()
            .filter(|(a, b)| b - a >= len.saturating_add(GAP_SLACK))
            .map(|&(_, b)| b)
            .max();
        let top = match released {
            Some(top) => top,
            None => *self.los.last()?,
        };
        let lo = top.checked_sub(len)? / CHUNK * CHUNK;
        self.take_released(lo, lo + len);
        if released.is_none() && lo + len < top {
            // below an unaligned host mapping: the space between stays free
            self.add_released(lo + len, top);
        }
        Some(lo)
    }

    /// Rule 7: glibc `mmap`s `len` bytes of host memory (a CPU tensor): at
    /// the top of the highest released range it fits in, else directly
    /// below the lowest chunk or mapping. Freed with [`Self::free`] of the
    /// address returned, which releases its range as a chunk's.
    pub(crate) fn host_map(&mut self, len: u64) -> Option<u64> {
        let top = match self
            .released
            .iter()
            .filter(|(a, b)| b - a >= len)
            .map(|&(_, b)| b)
            .max()
        {
            Some(top) => top,
            None => *self.los.last()?,
        };
        let lo = top.checked_sub(len)?;
        self.take_released(lo, top);
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((lo, len));
        self.push_chunk(Chunk { lo, hi: top, segs });
        Some(lo)
    }

    /// Rule 7 before the context: host memory glibc mapped before the
    /// process's CUDA context existed lies above it, the context's range
    /// having gone below the lowest mapping then. Maps `len` bytes directly
    /// above the mappings placed so far this way (the caller gives them
    /// lowest first), the first at B + `above` (default
    /// [`HOST_ABOVE_ANCHOR`], the measured median): what the
    /// context's creation maps between (a malloc arena, thread stacks,
    /// NVML) takes no chunk. Freed with
    /// [`Self::free`], which releases the range as a chunk's. `None` once a
    /// segment or the context's first kernel was placed (a process whose
    /// context exists), or when `len` is 0.
    pub(crate) fn host_map_above(&mut self, len: u64, above: Option<u64>) -> Option<u64> {
        let anchor = self.held?;
        let top = anchor + Self::CONTEXT_ABOVE_ANCHOR;
        // the context's chunk holds only its own two ranges, every other
        // chunk is such a mapping
        let untouched =
            self.chunks.first()?.segs.len() == 2 && self.chunks[1..].iter().all(|c| c.lo >= top);
        if len == 0 || !untouched || !self.launch_pending || !self.cublas_pending {
            return None;
        }
        // the highest mapping's top, else where the lowest one lies
        let lo = self
            .chunks
            .iter()
            .map(|c| c.hi)
            .max()?
            .max(anchor + above.unwrap_or(HOST_ABOVE_ANCHOR));
        let hi = lo.checked_add(len)?;
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((lo, len));
        self.push_chunk(Chunk { lo, hi, segs });
        Some(lo)
    }

    /// Rule 17 before the context: a mapping of `len` bytes that the
    /// process made before its CUDA context, at `offset` bytes over the
    /// context's anchor B, where the caller's layout puts it (OpenMP's pool
    /// started on the host: its stacks and arenas, the tensors around them,
    /// the context's own mappings in the gaps; `python/vramscope/_host_layout.py`).
    /// Freed with [`Self::free`]. `None` as [`Self::host_map_above`] gives it,
    /// or where `offset` lies under the context's top.
    pub(crate) fn host_map_at(&mut self, offset: u64, len: u64) -> Option<u64> {
        let anchor = self.held?;
        let top = anchor + Self::CONTEXT_ABOVE_ANCHOR;
        let untouched =
            self.chunks.first()?.segs.len() == 2 && self.chunks[1..].iter().all(|c| c.lo >= top);
        let lo = anchor.checked_add(offset)?;
        if len == 0 || lo < top || !untouched || !self.launch_pending || !self.cublas_pending {
            return None;
        }
        let hi = lo.checked_add(len)?;
        self.take_released(lo, hi);
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((lo, len));
        self.push_chunk(Chunk { lo, hi, segs });
        Some(lo)
    }

    /// Rule 17: `len` bytes at `offset` over the anchor that no mapping
    /// holds among those [`Self::host_map_at`] placed (an arena's given-back
    /// half): free for chunks, as a released range (rule 3).
    pub(crate) fn host_free_at(&mut self, offset: u64, len: u64) {
        let Some(anchor) = self.held else {
            return;
        };
        let lo = anchor + offset;
        if len > 0 && lo >= anchor + Self::CONTEXT_ABOVE_ANCHOR {
            self.add_released(lo, lo + len);
        }
    }

    /// Rule 9: ld.so maps a library of `span` bytes whose segments are 2 MiB
    /// aligned: `mmap(span + 2 MiB - 4 KiB)` top-down (the top of the
    /// highest free range that holds it, else below the lowest chunk or
    /// mapping), the 2 MiB aligned `span` of it kept and the rest given
    /// back. Never unmapped. The library's address, or `None` when the
    /// address space below the chunks is exhausted.
    pub(crate) fn library(&mut self, span: u64) -> Option<u64> {
        // (mappings are whole pages)
        let span = span.checked_next_multiple_of(HOST_PAGE)?;
        let want = span.checked_add(PAGE - HOST_PAGE)?;
        let released = self
            .released
            .iter()
            .filter(|(a, b)| b - a >= want)
            .map(|&(_, b)| b)
            .max();
        let top = match released {
            Some(top) => top,
            None => *self.los.last()?,
        };
        let at = top.checked_sub(want)?;
        let lo = at.checked_next_multiple_of(PAGE)?;
        let hi = lo + span;
        // what the loader gave back on either side stays free
        self.take_released(lo, hi);
        if released.is_none() && hi < top {
            // below the lowest chunk or mapping
            self.add_released(hi, top);
        }
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.push((lo, span));
        self.push_chunk(Chunk { lo, hi, segs });
        Some(lo)
    }

    /// `cudaFree(addr)`; a chunk left empty is released (rule 3).
    pub(crate) fn free(&mut self, addr: u64) {
        let (chunks, spare) = (&self.chunks, &mut self.spare_map);
        let map = self.chunk_of.get_or_insert_with(|| {
            let mut m = spare.take().unwrap_or_default();
            for (i, c) in chunks.iter().enumerate() {
                for &(a, _) in &c.segs {
                    m.insert(a, i as u32);
                }
            }
            m
        });
        let Some(i) = map.remove(&addr) else {
            return;
        };
        let i = i as usize;
        let c = &mut self.chunks[i];
        c.segs.retain(|s| s.0 != addr);
        if c.segs.is_empty() {
            let (lo, hi) = (c.lo, c.hi);
            // released: no hole of its own any more
            c.hi = c.lo;
            // (decreasing order)
            let found = self.los.binary_search_by(|x| lo.cmp(x));
            debug_assert!(found.is_ok(), "a released chunk's low end not kept");
            if let Ok(k) = found {
                self.los.remove(k);
            }
            self.add_released(lo, hi);
        }
        self.update(i);
    }

    /// Add `lo..hi` to the released ranges, keeping them sorted and merged.
    fn add_released(&mut self, lo: u64, hi: u64) {
        self.released.push((lo, hi));
        self.released.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.released.len());
        for &(a, b) in &self.released {
            match merged.last_mut() {
                Some(last) if last.1 >= a => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.released = merged;
    }

    /// Remove `lo..hi` from the released ranges.
    fn take_released(&mut self, lo: u64, hi: u64) {
        // (none in a run that has freed no segment: most runs)
        if self.released.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.released.len() + 1);
        for &(a, b) in &self.released {
            if b <= lo || a >= hi {
                out.push((a, b));
            } else {
                if a < lo {
                    out.push((a, lo));
                }
                if b > hi {
                    out.push((hi, b));
                }
            }
        }
        self.released = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 0x7f00_0000_0000;

    /// Offsets from B in MiB (signed).
    fn off(a: u64) -> i64 {
        (a as i64 - B as i64) / MIB as i64
    }

    /// Run `ops` (`+size` allocates, `-k` frees the k-th allocation) and
    /// return each allocation's offset.
    fn run(ops: &[i64]) -> Vec<i64> {
        let mut va = DriverVa::new(B);
        let mut addrs = Vec::new();
        for &op in ops {
            if op > 0 {
                addrs.push(va.malloc(op as u64 * MIB).unwrap());
            } else {
                va.free(addrs[(-op) as usize]);
            }
        }
        addrs.into_iter().map(off).collect()
    }

    /// `validation/segment_placement.py seq` on the GPU
    /// (fixtures/alloc/segment_placement_h200.txt): the anchor, 22 segments,
    /// two frees, four more.
    #[test]
    fn seq_experiment() {
        let mut ops = vec![2];
        ops.extend([
            32, 2, 20, 2, 2, 2, 2, 32, 20, 12, 16, 126, 250, 250, 2, 2, 60, 64, 2, 300, 2, 38,
        ]);
        ops.extend([-12, -13, 120, 250, 2, 2]);
        let got = run(&ops);
        let want = vec![
            -2, -448, 72, 74, 94, -480, -478, -476, -512, -474, -544, -532, -672, -928, -1184,
            -934, -932, -1248, -1312, -1188, -1632, -1332, -1696, -672, -1952, -1702, -1700,
        ];
        assert_eq!(got, want);
    }

    /// `fixtures/alloc/oom_retry_max_split`: ten chunks, the lowest five
    /// freed, a 700 MiB chunk at the top of the freed range and a 300 below
    /// it, the rest freed, then tails, the context's hole and the freed
    /// range reused. The trace has no anchor, so `want` is its addresses
    /// less one offset: all 23 then agree.
    #[test]
    fn oom_retry_max_split() {
        let mut ops = vec![150, 154, 156, 160, 162, 166, 168, 172, 174, 178];
        ops.extend([-9, -8, -7, -6, -5, 700, 300, -4, -3, -2, -1, 0]);
        ops.extend([20, 2, 20, 100, 48, 66, 74, 78, 2, 94, 84]);
        let want = vec![
            -576, -736, -896, -1056, -1248, -1440, -1632, -1824, -2016, -2208, -1952, -2272, -1972,
            -1252, 72, -544, -608, -704, -800, -896, -818, -992, -1088,
        ];
        assert_eq!(run(&ops), want);
    }

    /// `fixtures/alloc/default` and `empty_cache` (H100): every segment
    /// action of the trace, addresses as offsets from its anchor (the first
    /// 2 MiB segment + 2 MiB). `empty_cache` frees and reuses chunks.
    #[test]
    fn alloc_fixtures_default_and_empty_cache() {
        let default = [
            2, 252, 60, 210, 264, 2, 268, 288, 2, 284, 136, 294, 2, 2, 142, 274, 172, 276, 2, 2, 2,
            300, 2, 300,
        ];
        let want = vec![
            -2, -672, -736, -960, -1248, -984, -1536, -1824, -1268, -2112, -2272, -2592, -2298,
            -2296, -2752, -3040, -3232, -3520, -3244, -3242, -3240, -3840, -3540, -4160,
        ];
        assert_eq!(run(&default), want);
        let empty_cache = [
            2, 20, 132, 2, 118, 182, 156, 2, 108, 92, 2, 158, 184, 144, 188, 182, 2, 2, 192, -15,
            -12, -14, 150, 200, 174, 152, -19, -22, -3, 188, 2, -2, -13, -6, -11, -21, -5, -23,
            -20, -24, -16, -10, -7, 2, -9, -4, 78, 152, 142, 144, 200, 2, 2,
        ];
        let want = vec![
            -2, 72, -576, -444, -704, -896, -1056, -900, -1184, -1280, -1188, -1440, -1632, -1792,
            -1984, -2176, -1994, -1992, -2368, -2176, -2592, -2784, -1600, -2976, -2788, -1990,
            -2176, -576, -736, -896, -1408, -1208, -1206,
        ];
        assert_eq!(run(&empty_cache), want);
    }

    /// `fixtures/alloc/empty_cache`, the segment that shows best fit inside
    /// the newest chunk: two holes of one chunk, 184 MiB at +0 and 6 MiB at
    /// +186; the 2 MiB segment takes the 6 MiB one.
    #[test]
    fn best_fit_inside_the_newest_chunk() {
        // chunk of 192: 182 + 2 + 2, then the 182 and the first 2 freed.
        let got = run(&[182, 2, 2, -0, -1, 2]);
        assert_eq!(got[3] - got[0], 186);
    }

    #[test]
    fn context_holes_then_chunks_below() {
        assert_eq!(run(&[2, 20, 2, 2, 2]), vec![-2, 72, 92, 94, -448]);
    }

    /// Rule 6, whole (`fixtures/va_maps`: in `gpt2_train_fp32` the
    /// context's 518 MiB reservation goes at the first op of `forward0`;
    /// the traces' forward segments go into B-416..B from its top): `load`
    /// maps below the held range, then new chunks come down from B.
    #[test]
    fn the_first_kernels_release_the_context_range_whole() {
        let mut va = DriverVa::new(B);
        let mut got: Vec<i64> = [100, 20]
            .iter()
            .map(|&m| off(va.malloc(m * MIB).unwrap()))
            .collect();
        va.release_context();
        got.extend([20, 20].iter().map(|&m| off(va.malloc(m * MIB).unwrap())));
        // (the first 20 takes the context's upper hole, as before)
        assert_eq!(got, vec![-544, -444, 72, -32]);
        // once
        va.release_context();
        assert_eq!(off(va.malloc(20 * MIB).unwrap()), -64);
    }

    /// Rule 6 with a segment at B-2: the range is a chunk of its own, next
    /// after the context's in age, filled from the bottom (`fixtures/va_maps`: the
    /// Llama's trace and ViT's) before the context's B+72..B+96 hole
    /// (blind101/cw04 on the H200: 2 MiB segments at B-2, B+72 and B+74,
    /// the first `fill_`, then 74 MiB at B-416 and 14 MiB at B-342, not in
    /// the 18 MiB hole at B+78).
    #[test]
    fn with_a_segment_at_b_minus_2_the_range_is_the_second_oldest_chunk() {
        let mut va = DriverVa::new(B);
        let mut got: Vec<i64> = (0..3).map(|_| off(va.malloc(2 * MIB).unwrap())).collect();
        assert!(va.release_context());
        got.extend([74, 14].iter().map(|&m| off(va.malloc(m * MIB).unwrap())));
        // (the driver's 2 MiB at the release took B+76, the smallest hole then)
        assert_eq!(got, vec![-2, 72, 74, -416, -342]);
        // a chunk made before the release (below B-416) is newer than the
        // range: its hole is taken first (validation/run/07 on the H100)
        let mut va = DriverVa::new(B);
        let mut got: Vec<i64> = [2, 20, 40]
            .iter()
            .map(|&m| off(va.malloc(m * MIB).unwrap()))
            .collect();
        assert!(va.release_context());
        got.push(off(va.malloc(10 * MIB).unwrap()));
        assert_eq!(got, vec![-2, 72, -480, -438]);
        // after cuBLAS there is nothing to release
        let mut after = DriverVa::after_cublas(B);
        assert!(!after.release_context());
        assert_eq!(off(after.malloc(300 * MIB).unwrap()), -416);
    }

    /// A fresh process whose `load` made one 100 MiB segment (a chunk at
    /// B-544) and whose first kernels then ran: the driver's 2 MiB took the
    /// chunk's tail at B-444, and the context gave back B-416..B whole.
    fn released_below_one_chunk() -> DriverVa {
        let mut va = DriverVa::new(B);
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -544);
        assert!(va.release_context());
        va
    }

    /// Rule 8: the first cuBLAS handle's 64 MiB reservation is placed as a
    /// segment would be (here a new chunk at the top of the range the
    /// context gave back), then 2 MiB by rule 2; once, and never after
    /// [`DriverVa::after_cublas`].
    #[test]
    fn the_first_cublas_handle_reserves_64_mib_once() {
        let mut va = released_below_one_chunk();
        assert!(va.first_cublas());
        assert!(!va.first_cublas());
        // its 2 MiB went to the tail too (B-442): a 20 MiB segment after it,
        // and a new chunk below the reservation at B-64..B
        assert_eq!(off(va.malloc(20 * MIB).unwrap()), -440);
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -96);
        assert!(!DriverVa::after_cublas(B).first_cublas());
    }

    /// Rule 15: a thread's stack directly below the context, its arena's
    /// 128 MiB mapping below that, of which the 64 MiB aligned part is kept;
    /// a chunk then goes below the arena (B-544: the first chunk of
    /// `.cuda()` in vit_train_fp32, vit_infer_fp32 and
    /// deit_small_train_fp32_b32 on the H100, whose `from_config` starts
    /// OpenMP's worker; `docs/driver-placement.md`, session 23), the 24 MiB
    /// given back above the arena being too small for it (rule 1's slack).
    #[test]
    fn a_thread_s_arena_keeps_the_aligned_half_of_its_mapping() {
        let mut va = DriverVa::new(B);
        let stack = 8 * MIB + 4096;
        assert_eq!(off(va.thread(stack).unwrap()), -512);
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -544);
        // host memory that fits goes to the range given back above it
        let m = va.host_map(MIB).unwrap();
        assert_eq!(m + MIB, B - 416 * MIB - stack);
        // the mapping's start rounded up: from just under B-640 (a mapping
        // above at B-512..B-416, the stack under it), the arena at B-640
        let mut va = DriverVa::new(B);
        let _ = va.host_map(96 * MIB).unwrap();
        assert_eq!(off(va.thread(stack).unwrap()), -640);
    }

    /// Rule 15's two halves: a thread's stack at its start, its arena at
    /// its first `malloc`, placed by the state then: together as
    /// [`DriverVa::thread`]; with the other workers' stacks between, each
    /// arena below all of them (blind175/fs03's maps on the H200, session
    /// 41: 15 stacks and 2 arenas at one op, 13 arenas at the next).
    #[test]
    fn a_thread_s_arena_comes_at_its_first_malloc() {
        let stack = 8 * MIB + 4096;
        let mut together = DriverVa::new(B);
        let mut split = DriverVa::new(B);
        let arena = together.thread(stack).unwrap();
        assert_eq!(
            split.thread_stack(stack).map(|a| a + stack),
            Some(B - 416 * MIB)
        );
        assert_eq!(split.thread_arena(), Some(arena));
        // three stacks first: the arenas go below the three
        let mut va = DriverVa::new(B);
        for k in 1..=3 {
            assert_eq!(va.thread_stack(stack).unwrap(), B - 416 * MIB - k * stack);
        }
        let lowest = B - 416 * MIB - 3 * stack;
        let a1 = va.thread_arena().unwrap();
        assert!(a1 + THREAD_HEAP <= lowest && a1.is_multiple_of(THREAD_HEAP));
        assert!(va.thread_arena().unwrap() < a1);
    }

    /// Rule 6 after frees (the address map built) and next to a released
    /// chunk just below B-416: the two ranges merge; and a reset to a fresh
    /// process holds the range again.
    #[test]
    fn the_release_merges_with_a_released_chunk_and_a_reset_holds_it_again() {
        let mut va = DriverVa::new(B);
        let a = va.malloc(20 * MIB).unwrap(); // the context's upper hole
        let b = va.malloc(30 * MIB).unwrap(); // a chunk just below B-416
        let c = va.malloc(30 * MIB).unwrap(); // one below it
        assert_eq!((off(a), off(b), off(c)), (72, -448, -480));
        va.free(b);
        assert!(va.release_context());
        // the driver's 2 MiB went to the newest chunk's hole (not to B-2,
        // which would have kept the range a chunk of its own):
        // B-2..B went back with the range, and the next 2 MiB takes what is
        // left of the context's upper hole
        assert_eq!(off(va.malloc(2 * MIB).unwrap()), 92);
        assert!(!va.release_context());
        // B-448..B is one released range: a 96 MiB chunk at its top
        assert_eq!(off(va.malloc(96 * MIB).unwrap()), -96);
        va.reset(B, true);
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -544);
        assert!(va.release_context());
        va.reset(B, false);
        assert!(!va.release_context());
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -416);
    }

    /// Rule 7, `gpt2_train_fp32` as `validation/malloc_log.c` logged it
    /// (`fixtures/va_maps/mlog.tar.xz`), given that run's mappings: a 7.34 MiB
    /// Python buffer (which the twin does not map), then `from_config`'s
    /// `wte`, eight 4 MiB MLP weights and the tied head's own weight (freed when tied) below the held context; `.cuda()` then
    /// puts `wte`'s 100 MiB segment in a chunk at B-704 (below the lowest
    /// mapping, 32 MiB aligned, over the freed head) and, `wte` freed and
    /// the holes filled, a chunk for a 20 MiB segment at the aligned top of
    /// its range, B-480: the two chunks the driver mapped in that run.
    #[test]
    fn cpu_tensors_mapped_below_the_context_move_the_chunks() {
        let mut va = DriverVa::new(B);
        let host = |va: &mut DriverVa, len: u64| va.host_map(len).unwrap();
        let py = host(&mut va, 7_692_288);
        assert_eq!(py, B - 416 * MIB - 7_692_288);
        let wte = host(&mut va, 102_928_384);
        let mlp: Vec<u64> = (0..8).map(|_| host(&mut va, 4_198_400)).collect();
        assert_eq!(mlp[0], wte - 4_198_400);
        let head = host(&mut va, 102_928_384);
        va.free(head);
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -704);
        va.free(wte);
        // 20 MiB segments: the new chunk's tail, the context's upper hole
        // (rules 2 and 4), then a chunk in `wte`'s freed range
        let twenties: Vec<i64> = (0..3).map(|_| off(va.malloc(20 * MIB).unwrap())).collect();
        assert_eq!(twenties, vec![-604, 72, -480]);
        // host memory goes to the top of the highest range it fits in: what
        // is left of `wte`'s, above the chunk
        let top = va.host_map(MIB).unwrap();
        assert_eq!(top + MIB, wte + 102_928_384);
        // a chunk needs 32 MiB more than its length: not there
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -736);
    }

    /// A chunk aligned down below an unaligned host mapping leaves the
    /// space between free: host memory and chunks that fit go there.
    #[test]
    fn the_space_a_chunk_leaves_below_a_mapping_stays_free() {
        let mut va = DriverVa::new(B);
        let m = va.host_map(10 * MIB).unwrap();
        assert_eq!(off(m), -426);
        // 100 MiB: a 128 MiB chunk at B-576, B-448..B-426 left free
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -576);
        va.free(m);
        // B-448..B-416 is free: 12 MiB of host memory at its top
        assert_eq!(off(va.host_map(12 * MIB).unwrap()), -428);
    }

    /// Rule 9: cuDNN's four libraries (the spans the runtime loads) go in
    /// load order to the top of the highest free range that holds each
    /// plus 2 MiB less a page, starting at the next 2 MiB boundary, inside
    /// the range the context gave back (its top B): graph at B-8, the
    /// precompiled engines at B-250, the heuristic at B-316, the runtime
    /// compiled engines at B-352. A chunk then finds a gap of its length +
    /// 32 MiB only at B-416..B-352, and the next goes below every chunk.
    #[test]
    fn libraries_go_top_down_2_mib_aligned() {
        let mut va = released_below_one_chunk();
        // (the engine's `CUDNN_LIBRARY_SPANS`, measured in `fixtures/va_maps`)
        let spans = [6_549_504, 251_686_912, 67_117_056, 35_680_256];
        let got: Vec<i64> = spans.iter().map(|&s| off(va.library(s).unwrap())).collect();
        assert_eq!(got, vec![-8, -250, -316, -352]);
        // (the 2 MiB the driver took at the release is the first chunk's
        // tail, B-444)
        assert_eq!(off(va.malloc(20 * MIB).unwrap()), -442);
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -384);
        // below the driver's pool (rule 14: B-1056..B-544)
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -1088);
        // what the loader gave back above the graph library is free: 1 MiB
        // of host memory goes to its top, just below B
        assert_eq!(va.host_map(MIB).unwrap(), B - MIB);
    }

    /// Rule 9 with no free range that holds the library: below the lowest
    /// chunk, the space between its end and that chunk left free.
    #[test]
    fn a_library_that_fits_nowhere_goes_below_the_lowest_chunk() {
        let mut va = DriverVa::new(B);
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -544);
        let lib = va.library(6_549_504).unwrap();
        assert_eq!(off(lib), -552);
        // B-545.75..B-544 stays free: 1 MiB of host memory at its top
        assert_eq!(va.host_map(MIB).unwrap(), B - 545 * MIB);
        // a chunk of 64 MiB goes below the library, 32 MiB aligned
        assert_eq!(off(va.malloc(40 * MIB).unwrap()), -640);
    }

    /// The span of `libtriton.so` (`vramscope_engine`'s `LIBTRITON_SPAN`).
    const LIBTRITON: u64 = 148_140_032;

    /// Rules 6 and 10, blind21/u06 on the H200 (`validation/va_run_maps.py`,
    /// its memory history; three processes agree): the model's segments in
    /// the context's holes, `libtriton.so` mapped below the context at the
    /// optimizer's construction, the driver's 2 MiB at the first kernel (a
    /// random one, which keeps the range), the first convolution's output
    /// below the library, then the range given back at the first kernel of
    /// PyTorch's own and filled from its low end.
    #[test]
    fn blind21_u06_first_kernels_and_libtriton() {
        let mut va = DriverVa::new(B);
        let mut got: Vec<i64> = [2, 20, 2]
            .iter()
            .map(|&m| off(va.malloc(m * MIB).unwrap()))
            .collect();
        let lib = va.host_map(LIBTRITON).unwrap();
        assert_eq!(lib, B - 416 * MIB - LIBTRITON);
        va.first_launch();
        got.push(off(va.malloc(64 * MIB).unwrap()));
        assert!(va.release_context());
        got.extend(
            [64, 64, 130, 66, 66]
                .iter()
                .map(|&m| off(va.malloc(m * MIB).unwrap())),
        );
        // the GPU's addresses, less the first segment's + 2 MiB
        assert_eq!(got, vec![-2, 72, 92, -640, -416, -352, -288, -158, -92]);
        // the driver's 2 MiB took the last of the upper hole, B+94: the next
        // 2 MiB goes to what is left of the range
        assert_eq!(va.malloc(2 * MIB).map(off), Some(-26));
    }

    /// Rules 6, 8 and 10, blind25/y04 on the H200: the first kernels are
    /// random ones (the driver's 2 MiB, B+74), the first cuBLAS handle's
    /// reservation goes below `libtriton.so` (the range is still held), the
    /// cuBLAS workspace below it, the cuBLASLt workspace's 2 MiB in the
    /// context's upper hole.
    #[test]
    fn blind25_y04_cublas_before_the_range_goes_back() {
        let mut va = DriverVa::new(B);
        let mut got: Vec<i64> = [2, 2]
            .iter()
            .map(|&m| off(va.malloc(m * MIB).unwrap()))
            .collect();
        va.host_map(LIBTRITON).unwrap();
        va.first_launch();
        va.first_launch();
        assert!(va.first_cublas());
        got.extend([32, 2].iter().map(|&m| off(va.malloc(m * MIB).unwrap())));
        assert_eq!(got, vec![-2, 72, -672, 78]);
    }

    /// Rule 5: after the first cuBLAS call the context's range below the
    /// anchor, B-416..B, is one hole of the oldest chunk (the 414 MiB the
    /// context gave back and the 2 MiB hole at B-2). Segments take holes
    /// best fit, low end first (2 and 20 MiB go to the 24 MiB hole at B+72,
    /// 300 and 100 MiB to the large one) until one fits nowhere; the chunk
    /// made for it is the newest, so its tail is taken first from then on.
    #[test]
    fn after_cublas_the_context_range_is_filled_first() {
        let mut va = DriverVa::after_cublas(B);
        let got: Vec<i64> = [300, 2, 20, 100, 16, 2, 20, 2]
            .iter()
            .map(|&m| off(va.malloc(m * MIB).unwrap()))
            .collect();
        assert_eq!(got, vec![-416, 72, 74, -116, -16, 94, -448, -428]);
    }

    /// Rule 11, replayed from an H200 process (`syn_big` of
    /// `fixtures/va_maps/host_built_h200.tar.xz`): a 700 MiB CPU tensor made
    /// before the context, copied to the device and freed, then nine 20 MiB
    /// and two 64 MiB segments. The copy goes below the context, the first
    /// 20 MiB into its hole, the rest into the freed tensor's range from its
    /// aligned top down, as on the GPU.
    #[test]
    fn cpu_tensors_made_before_the_context_lie_above_it() {
        let mut va = DriverVa::new(B);
        let host = va.host_map_above(700 * MIB + HOST_PAGE, None).unwrap();
        assert_eq!(off(host), 246);
        assert_eq!(off(va.malloc(700 * MIB).unwrap()), -1120);
        // a process whose context exists maps no more of these
        assert_eq!(va.host_map_above(9 * MIB, None), None);
        va.free(host);
        let got: Vec<i64> = [20; 9]
            .into_iter()
            .chain([64; 2])
            .map(|size| off(va.malloc(size * MIB).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![72, 896, 864, 832, 800, 768, 736, 704, 672, 608, 544]
        );
        // several tensors: lowest first, each directly above the last
        let mut va = DriverVa::new(B);
        let a = va.host_map_above(9 * MIB, None).unwrap();
        let b = va.host_map_above(733 * MIB, None).unwrap();
        assert_eq!((off(a), off(b)), (246, 255));
        // a GPU process's own offset, read from its maps (session 44: 236 to 270 MiB)
        let mut va = DriverVa::new(B);
        let a = va.host_map_above(9 * MIB, Some(266 * MIB)).unwrap();
        let b = va.host_map_above(733 * MIB, Some(266 * MIB)).unwrap();
        assert_eq!((off(a), off(b)), (266, 275));
    }

    /// Rule 17 (session 62, blind269/jj04's H100 maps): OpenMP's pool
    /// started before the context lays its arenas 128 MiB apart over B+96;
    /// the 64 MiB between them, given back, take chunks by rule 3, the
    /// highest first, at their aligned top; a mapping placed in one leaves it.
    #[test]
    fn a_pool_s_arena_gaps_above_the_context_take_chunks() {
        let mut va = DriverVa::new(B);
        for k in 0..4 {
            let at = 96 + 128 * k;
            assert_eq!(off(va.host_map_at(at * MIB, 64 * MIB).unwrap()), at as i64);
            if k > 0 {
                va.host_free_at((at - 64) * MIB, 64 * MIB);
            }
        }
        // the context's arena in the lowest gap; its chunk of files in the highest
        assert_eq!(off(va.host_map_at(160 * MIB, 64 * MIB).unwrap()), 160);
        assert_eq!(off(va.host_map_at(448 * MIB, 32 * MIB).unwrap()), 448);
        // under the context's top: not this rule's
        assert_eq!(va.host_map_at(64 * MIB, MIB), None);
        let got: Vec<i64> = [20; 4]
            .into_iter()
            .map(|size| off(va.malloc(size * MIB).unwrap()))
            .collect();
        // the context's hole, the gap B+288..352 (B+416..448 is too small with the slack), then
        // below the context (rule 1)
        assert_eq!(got, vec![72, 320, -448, -480]);
        // a process whose context exists maps no more of these
        assert_eq!(va.host_map_at(1024 * MIB, MIB), None);
    }

    /// Rule 14 as blind64/bl01's H200 memory history shows it: a model built
    /// on the host (here one 810 MiB tensor above the context, rule 11),
    /// moved to the device and freed before the first kernels; its range
    /// takes the driver's pool at the op that gives the context's range
    /// back, so the first forward's 24 MiB chunk lies 512 MiB under the
    /// range's top (B+512; B+1024 without the pool), and its 2 MiB segment
    /// in that chunk's hole.
    #[test]
    fn the_driver_s_pool_takes_a_freed_host_range() {
        let mut va = DriverVa::new(B);
        let host = va.host_map_above(810 * MIB, None).unwrap();
        assert_eq!(off(host), 246);
        assert_eq!(off(va.malloc(94 * MIB).unwrap()), -512);
        assert_eq!(off(va.malloc(20 * MIB).unwrap()), 72);
        va.free(host);
        va.first_launch();
        assert!(va.release_context());
        let got: Vec<i64> = [24, 2, 20]
            .into_iter()
            .map(|size| off(va.malloc(size * MIB).unwrap()))
            .collect();
        assert_eq!(got, vec![512, 536, 480]);
    }

    /// Rule 14's top, laid out (`vramscope run`): the pool's top 8 MiB are
    /// the newest chunk, the driver's 2 MiB buffer at their low end; a
    /// 10 MiB mapping (rule 19's) misses them, the next 2 MiB segments fill
    /// them (blind303/kr04's H100 maps: the pool at -656..-144 MiB from the
    /// 8.25 MiB buffer, its 2 MiB segment at -148, the cuBLAS handle's 2 MiB
    /// between).
    #[test]
    fn the_pool_s_top_takes_2_mib_segments_first() {
        let mut va = DriverVa::new(B);
        va.lay_out_pool_top();
        assert_eq!(off(va.malloc(100 * MIB).unwrap()), -544);
        assert!(va.release_context());
        // the pool at B-1056..B-544 as in `released_below_one_chunk`; its
        // top B-552..B-544, 6 MiB free: the 10 MiB go to the 100 MiB
        // segment's chunk (above the driver's 2 MiB of the first launch)
        assert_eq!(off(va.malloc(10 * MIB).unwrap()), -442);
        let got: Vec<i64> = (0..4).map(|_| off(va.malloc(2 * MIB).unwrap())).collect();
        assert_eq!(got, vec![-550, -548, -546, -432]);
        let mut plain = released_below_one_chunk();
        assert_eq!(off(plain.malloc(10 * MIB).unwrap()), -442);
        assert_eq!(off(plain.malloc(2 * MIB).unwrap()), -432);
    }

    /// Rule 14 without a released range that holds the pool: it goes below
    /// the lowest chunk, and the next chunk below it.
    #[test]
    fn the_driver_s_pool_goes_below_the_lowest_chunk() {
        let mut va = released_below_one_chunk();
        // the context's range (416 MiB) is too small for it: the pool lies
        // at B-1056..B-544, directly below the first chunk
        assert_eq!(off(va.malloc(400 * MIB).unwrap()), -1472);
        // the context's range still takes what fits
        assert_eq!(off(va.malloc(32 * MIB).unwrap()), -32);
    }
}
