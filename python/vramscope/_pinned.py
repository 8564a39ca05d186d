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


class PinnedHost:
    """The blocks of one process's caching host allocator."""

    def __init__(self) -> None:
        #: block size -> the free blocks' addresses (None: not laid out), the last freed last
        self.free: dict[int, list[int | None]] = {}
        #: the storages holding a block, by id of their weak reference
        self.held: dict[int, weakref.ref] = {}

    def allocate(self, cap, storage) -> None:
        """`storage` (a CPU storage the program asked to be page-locked) takes a block until it
        dies. A new block is laid out only once the CUDA context exists (a first `cudaHostAlloc`
        would start it, above its own block: not laid out)."""
        nbytes = storage.nbytes()
        if nbytes == 0:
            return  # no block (`allocate(0)` returns a null pointer)
        size = block_size(nbytes)
        blocks = self.free.get(size)
        if blocks:
            addr = blocks.pop()
        else:
            # (a native module built before rule 16 lays out none)
            alloc = getattr(cap.device, "pinned_alloc", None)
            addr = alloc(size) if cap.started and alloc is not None else None
        held = self.held

        def release(ref, size=size, addr=addr):
            held.pop(id(ref), None)
            self.free.setdefault(size, []).append(addr)

        ref = weakref.ref(storage, release)
        held[id(ref)] = ref

    def empty_cache(self, cap) -> None:
        """`torch._C._host_emptyCache()`: every free block goes back to the driver."""
        for blocks in self.free.values():
            for addr in blocks:
                if addr is not None:
                    cap.device.pinned_free(addr)
        self.free.clear()
