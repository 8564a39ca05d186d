"""PyTorch's caching host allocator for page-locked memory (`pin_memory()`, `empty(...,
pin_memory=True)`; aten/src/ATen/core/CachingHostAllocator.h): a request takes a block of its size
rounded up to a power of two (`PowerOf2Ceil`) from that size's free list, the last freed first, or
makes one with `cudaHostAlloc`; a freed block goes back to its list (once the copies it fed are done,
which the twin takes as done by the next request); `torch._C._host_emptyCache()` frees the listed
blocks (`cudaFreeHost`). The blocks hold no device memory: they take address space among the segments
(driver address-space rule 16, `docs/driver-placement.md`), which the native device lays out.

The settings' pinned keys (aten/src/ATen/cuda/CachingHostAllocator.cpp, 2.11):
`pinned_reserve_segment_size_mb` makes one `cudaHostAlloc` of that size at the first new block, from
which new blocks are carved (4 KiB rounded) while they fit: no `cudaHostAlloc` of their own and never
freed (`free_block` skips them), so the timing counts of `host_memory_stats()` differ from the block
counts. `pinned_use_cuda_host_register` allocates with `malloc` and `cudaHostRegister`: the same
blocks and statistics, in glibc's memory, whose placement the twin does not lay out (named
unmeasured). `pinned_num_register_threads` only parallelises the pages' pre-faulting.
`pinned_use_background_threads` moves the processing of the copies' events to a thread polling every
100 us: when a block freed after feeding a copy is reused is timing, taken as by the next request as
without it (named unmeasured)."""

from __future__ import annotations

import weakref

#: `PinnedReserveSegment::allocate` rounds every carved block to 4 KiB
_RESERVE_ROUNDING = 4096


def block_size(nbytes: int) -> int:
    """The block a request of `nbytes` takes: the next power of two (`c10::llvm::PowerOf2Ceil`)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


#: the driver's page-locked buffer that blocks of this size or less share (rule 16)
_DRIVER_BUFFER = 2 << 20


class _Carved:
    """The address of a block carved from the reserve segment (not laid out on its own)."""

    def __repr__(self) -> str:
        return "<carved>"


_CARVED = _Carved()


class _Stat:
    """`c10::CachingAllocator::Stat`: current, peak, allocated (increases), freed (decreases)."""

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, n: int) -> None:
        self.current += n
        self.allocated += n
        self.peak = max(self.peak, self.current)

    def decrease(self, n: int) -> None:
        self.current -= n
        self.freed += n

    def as_dict(self) -> dict:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated, "freed": self.freed}


class PinnedHost:
    """The blocks of one process's caching host allocator."""

    def __init__(self) -> None:
        #: block size -> the free blocks' addresses (None: not laid out; `_CARVED`: from the
        #: reserve segment), the last freed last
        self.free: dict[int, list] = {}
        #: the storages holding a block, by id of their weak reference
        self.held: dict[int, weakref.ref] = {}
        #: `host_memory_stats()`: the blocks made (and their bytes), and per block size the
        #: blocks handed out (peaks summed over the sizes, "a best-effort approximation")
        self.blocks, self.block_bytes = _Stat(), _Stat()
        #: (never decreased here: see `allocate`'s `release`)
        self.active: dict[int, tuple[_Stat, _Stat]] = {}
        #: the `host_alloc_time` / `host_free_time` counts: `cudaHostAlloc` (or
        #: `cudaHostRegister`) and `cudaFreeHost` calls (`allocate_host_memory_slowpath`,
        #: `free_block_slowpath`)
        self.host_allocs = self.host_frees = 0
        #: the reserve segment's bytes left (`get_reserve_segment`, made at the first new block
        #: when `pinned_reserve_segment_size_mb` is set then); None before or without one
        self.reserve_left: int | None = None
        self.reserve_made = False
        #: whether a block of 2 MiB or less was laid out: the driver's small-block buffer exists
        self.small_mapped = False

    def allocate(self, cap, storage) -> None:
        """`storage` (a CPU storage the program asked to be page-locked) takes a block until it
        dies. A new block is laid out only once the CUDA context exists (a first `cudaHostAlloc`
        would start it, above its own block: not laid out)."""
        nbytes = storage.nbytes()
        if nbytes == 0:
            return  # no block (`allocate(0)` returns a null pointer)
        size, addr = self._take(cap, nbytes)
        held = self.held

        def release(ref, size=size, addr=addr):
            # `free` of a block with no events puts it back on its free list and leaves the
            # active statistics as they are (only `process_events` decreases them, for a block
            # whose copies' events completed: ATen/core/CachingHostAllocator.h, 2.11); the
            # H200's active_bytes stayed up after every block was freed (ma60_malloc_async.py)
            held.pop(id(ref), None)
            self.free.setdefault(size, []).append(addr)

        ref = weakref.ref(storage, release)
        held[id(ref)] = ref

    def transient(self, cap, nbytes: int) -> None:
        """A block taken and given back at once: `.item()`'s. `_local_scalar_dense_cuda`
        (aten/src/ATen/native/cuda/CUDAScalar.cu, 2.11) copies the scalar into a one-element
        page-locked `empty_cpu` ("to avoid implicit locking/sync in cuda library due to pageable
        memory") with `memcpy_and_sync`, which records no event, so the block is back on its
        size's free list when the call returns. The process's first such block is a small
        `cudaHostAlloc`: the driver maps a 2 MiB buffer for it (rule 16)."""
        size, addr = self._take(cap, nbytes)
        self.free.setdefault(size, []).append(addr)

    def _take(self, cap, nbytes: int) -> tuple[int, object]:
        """A block for a request of `nbytes` (> 0): the last freed of its size, or a new one; its
        size and address (None where not laid out)."""
        size = block_size(nbytes)
        blocks = self.free.get(size)
        active = self.active.setdefault(size, (_Stat(), _Stat()))
        active[0].increase(1)
        active[1].increase(size)
        if blocks:
            return size, blocks.pop()
        self.blocks.increase(1)
        self.block_bytes.increase(size)
        return size, self._new_block(cap, size)

    def _settings(self, cap) -> tuple[bool, int, bool, int]:
        settings = getattr(cap.device, "pinned_settings", None)
        return settings() if settings is not None else (False, 1, False, 0)

    def _new_block(self, cap, size: int):
        """`allocate_host_memory`: a block carved from the reserve segment (the address a
        `_Carved` marks), or its own `cudaHostAlloc`: its address among the segments (None where
        not laid out)."""
        use_register, _, background, reserve_mb = self._settings(cap)
        if background:
            cap.note_unmeasured(
                "pinned_use_background_threads (when a pinned block freed after a copy is reused)",
                "pinned_use_background_threads: a pinned block freed after feeding a copy is taken "
                "as reusable by the next request, as without the background thread",
            )
        if not self.reserve_made:
            self.reserve_made = True
            if reserve_mb > 0:
                self.reserve_left = reserve_mb << 20
                self._host_alloc(cap, reserve_mb << 20, use_register)
        carved = -(-size // _RESERVE_ROUNDING) * _RESERVE_ROUNDING
        if self.reserve_left is not None and carved <= self.reserve_left:
            self.reserve_left -= carved
            return _CARVED
        return self._host_alloc(cap, size, use_register)

    def _host_alloc(self, cap, size: int, use_register: bool):
        """`allocate_host_memory_slowpath`: `cudaHostAlloc`, laid out among the segments once the
        CUDA context exists (a first `cudaHostAlloc` would start it, above its own block: not laid
        out), or `malloc` and `cudaHostRegister` (glibc's memory: not laid out)."""
        self.host_allocs += 1
        if use_register:
            cap.note_unmeasured(
                "pinned_use_cuda_host_register (where glibc maps the pinned blocks)",
                "pinned_use_cuda_host_register: the pinned blocks' glibc mappings are not laid out "
                "in the address space",
            )
            return None
        # (a native module built before rule 16 lays out none)
        alloc = getattr(cap.device, "pinned_alloc", None)
        if not (cap.started and alloc is not None):
            return None
        if size <= _DRIVER_BUFFER:
            # one of the driver's 2 MiB small-block buffers is mapped now (rule 16), which a cuDNN
            # handle made later then does not map (rule 18: `Capture.cudnn_plan`)
            self.small_mapped = True
        return alloc(size)

    def empty_cache(self, cap) -> None:
        """`torch._C._host_emptyCache()`: every free block goes back to the driver, but those carved
        from the reserve segment, which is never freed (`free_block`)."""
        for size, blocks in self.free.items():
            for addr in blocks:
                if addr is not _CARVED:
                    self.host_frees += 1
                if addr is not None and addr is not _CARVED:
                    cap.device.pinned_free(addr)
                self.blocks.decrease(1)
                self.block_bytes.decrease(size)
        self.free.clear()

    def holds(self, storage) -> bool:
        """Whether `storage` (a host storage) holds one of the blocks."""
        ptr = storage.data_ptr()
        if ptr == 0:
            return False
        for ref in list(self.held.values()):
            held = ref()
            if held is not None and held.data_ptr() == ptr:
                return True
        return False

    def held_pointers(self) -> set[int]:
        """The data pointers of the storages holding a block now."""
        out = set()
        for ref in list(self.held.values()):
            storage = ref()
            if storage is not None:
                out.add(storage.data_ptr())
        return out

    def stats(self) -> dict:
        """`torch._C._cuda_hostMemoryStats()` as torch/cuda/memory.py's `host_memory_stats` documents
        it for 2.11: `allocations` and `allocated_bytes` the blocks the allocator owns (active and
        cached), `active_requests` and `active_bytes` those handed out, `num_host_alloc` /
        `num_host_free` the `cudaHostAlloc` / `cudaFreeHost` calls; no time is simulated."""
        sums = [_Stat(), _Stat()]
        for pair in self.active.values():
            for total, one in zip(sums, pair, strict=True):
                for key in ("current", "peak", "allocated", "freed"):
                    setattr(total, key, getattr(total, key) + getattr(one, key))

        def timing(count):
            return {"total": 0, "max": 0, "min": 0, "count": count, "avg": 0}

        return {
            "allocations": self.blocks.as_dict(),
            "allocated_bytes": self.block_bytes.as_dict(),
            "active_requests": sums[0].as_dict(),
            "active_bytes": sums[1].as_dict(),
            "num_host_alloc": self.blocks.allocated,
            "num_host_free": self.blocks.freed,
            "host_alloc_time": timing(self.host_allocs),
            "host_free_time": timing(self.host_frees),
        }

    def reset_peak(self) -> None:
        for stat in (self.blocks, self.block_bytes, *(s for pair in self.active.values() for s in pair)):
            stat.peak = stat.current

    def reset_accumulated(self) -> None:
        for stat in (self.blocks, self.block_bytes, *(s for pair in self.active.values() for s in pair)):
            stat.allocated = stat.freed = 0
        # (`DurationStat::reset_accumulated`: the counts too)
        self.host_allocs = self.host_frees = 0
