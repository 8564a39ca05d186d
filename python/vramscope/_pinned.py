"""PyTorch's caching host allocator for page-locked memory (`pin_memory()`, `empty(...,
pin_memory=True)`; aten/src/ATen/core/CachingHostAllocator.h): a request takes a block of its size
rounded up to a power of two (`PowerOf2Ceil`) from that size's free list, the last freed first, or
makes one with `cudaHostAlloc`; a freed block goes back to its list (once the copies it fed are done,
which the twin takes as done by the next request); `torch._C._host_emptyCache()` frees the listed
blocks (`cudaFreeHost`). The blocks hold no device memory: they take address space among the segments
(driver address-space rule 16, `docs/driver-placement.md`), which the native device lays out."""

from __future__ import annotations

import weakref


def block_size(nbytes: int) -> int:
    """The block a request of `nbytes` takes: the next power of two (`c10::llvm::PowerOf2Ceil`)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


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
        #: block size -> the free blocks' addresses (None: not laid out), the last freed last
        self.free: dict[int, list[int | None]] = {}
        #: the storages holding a block, by id of their weak reference
        self.held: dict[int, weakref.ref] = {}
        #: `host_memory_stats()`: the blocks made (and their bytes), and per block size the
        #: blocks handed out (peaks summed over the sizes, "a best-effort approximation")
        self.blocks, self.block_bytes = _Stat(), _Stat()
        self.active: dict[int, tuple[_Stat, _Stat]] = {}

    def allocate(self, cap, storage) -> None:
        """`storage` (a CPU storage the program asked to be page-locked) takes a block until it
        dies. A new block is laid out only once the CUDA context exists (a first `cudaHostAlloc`
        would start it, above its own block: not laid out)."""
        nbytes = storage.nbytes()
        if nbytes == 0:
            return  # no block (`allocate(0)` returns a null pointer)
        size = block_size(nbytes)
        blocks = self.free.get(size)
        active = self.active.setdefault(size, (_Stat(), _Stat()))
        active[0].increase(1)
        active[1].increase(size)
        if blocks:
            addr = blocks.pop()
        else:
            self.blocks.increase(1)
            self.block_bytes.increase(size)
            # (a native module built before rule 16 lays out none)
            alloc = getattr(cap.device, "pinned_alloc", None)
            addr = alloc(size) if cap.started and alloc is not None else None
        held = self.held

        def release(ref, size=size, addr=addr):
            held.pop(id(ref), None)
            active[0].decrease(1)
            active[1].decrease(size)
            self.free.setdefault(size, []).append(addr)

        ref = weakref.ref(storage, release)
        held[id(ref)] = ref

    def empty_cache(self, cap) -> None:
        """`torch._C._host_emptyCache()`: every free block goes back to the driver."""
        for size, blocks in self.free.items():
            for addr in blocks:
                if addr is not None:
                    cap.device.pinned_free(addr)
                self.blocks.decrease(1)
                self.block_bytes.decrease(size)
        self.free.clear()

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
            "host_alloc_time": timing(self.blocks.allocated),
            "host_free_time": timing(self.blocks.freed),
        }

    def reset_peak(self) -> None:
        for stat in (self.blocks, self.block_bytes, *(s for pair in self.active.values() for s in pair)):
            stat.peak = stat.current

    def reset_accumulated(self) -> None:
        for stat in (self.blocks, self.block_bytes, *(s for pair in self.active.values() for s in pair)):
            stat.allocated = stat.freed = 0
