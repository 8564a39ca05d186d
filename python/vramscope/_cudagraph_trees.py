"""Inductor's CUDA graph trees (`torch.compile(mode="reduce-overhead")`) on the simulated GPU.

PyTorch's own `torch/_inductor/cudagraph_trees.py` runs unchanged: its tree manager decides
warm-up, recording and replay, generations, liveness checks and re-recording as on the GPU. What it
asks of the CUDA caching allocator and of storages (the `torch._C` functions below) is answered by
the twin: allocation into the tree's private pool on its stream, a storage's data pointer, a
storage without a deleter at a recorded address (a replayed output, which the allocator does not
count), freeing a storage's block without freeing the storage, and the pool's checkpoint.
"""

from __future__ import annotations

import weakref

import torch

from . import _cuda

#: a simulated storage's data pointer where it is not the one its allocation gives it: a storage
#: made at a recorded address (`_construct_storage_from_data_pointer`), by the storage's `_cdata`
_AT: dict[int, int] = {}


def storage_ptr(cdata: int) -> int:
    """A simulated storage's data pointer: its recorded address where it was made at one, else
    one of its own (distinct for distinct storages, 512-aligned as the caching allocator's
    blocks)."""
    at = _AT.get(cdata)
    return (cdata << 16) if at is None else at


def private_stream(pool, stream: int) -> int:
    """Where the twin keeps private pool `pool`'s blocks for `stream` (`_cuda.CUDAGraph`'s key)."""
    return _cuda._PRIVATE_POOL_STREAMS + (tuple(pool)[1] << 24) + (stream & 0xFFFFFF)


class _CheckpointState:
    """`_cuda_getCheckpointState`'s allocator state of a private pool: the blocks allocated in it
    then, by data pointer (their sizes)."""

    __slots__ = ("blocks", "pool")

    def __init__(self, pool, blocks):
        self.pool = pool
        self.blocks = blocks


def patch(p, cap) -> None:
    """Install the twin's answers to what `cudagraph_trees.py` asks of `torch._C`, for the
    capture's life."""
    C = torch._C
    storages = cap.storages
    original_ptr = torch.UntypedStorage.data_ptr

    def untyped_data_ptr(self):
        key = self._cdata
        if key in storages:
            # an empty storage's is null, as a zero-byte allocation's
            return storage_ptr(key) if self.nbytes() else 0
        return original_ptr(self)

    p.set(torch.UntypedStorage, "data_ptr", untyped_data_ptr)

    def register(st, handle, pool=None):
        """`st` made a simulated storage holding `handle` (None: no allocation)."""
        key = st._cdata

        def release(_ref, key=key):
            _AT.pop(key, None)
            entry = storages.pop(key, None)
            if entry is not None and entry[0] is not None and cap.active:
                cap.device.free(entry[0])

        storages[key] = (handle, weakref.ref(st, release))

    def pool_of(handle):
        return cap.pool_handles.get(handle)

    # ---- the allocator: the tree's private pool --------------------------------------------

    #: a private pool -> the stream the tree manager allocates to it on
    pool_stream: dict = {}

    def begin_allocate_to_pool(device, pool):
        """`beginAllocateCurrentThreadToPool`: what the thread allocates comes from `pool`; the
        tree manager allocates on its own stream only (`_use_cuda_memory_pool_manager`)."""
        pool_stream[tuple(pool)] = cap.stream
        cap.pool_streams[cap.stream] = private_stream(pool, cap.stream)

    def end_allocate_to_pool(device, pool):
        for stream, private in list(cap.pool_streams.items()):
            if private == private_stream(pool, stream):
                del cap.pool_streams[stream]

    p.set(C, "_cuda_beginAllocateCurrentThreadToPool", begin_allocate_to_pool)
    p.set(C, "_cuda_endAllocateToPool", end_allocate_to_pool)
    # the pool's use count: the tree manager's own graph holds it for the process's life
    p.set(C, "_cuda_releasePool", lambda device, pool: None)

    def in_pool(pool):
        """The simulated storages whose blocks are in private pool `pool`: (key, handle, nbytes)."""
        out = []
        for key, (handle, ref) in list(storages.items()):
            if handle is None:
                continue
            private = pool_of(handle)
            if private is None or (private - _cuda._PRIVATE_POOL_STREAMS) >> 24 != tuple(pool)[1]:
                continue
            st = ref()
            if st is not None:
                out.append((key, handle, st))
        return out

    def get_checkpoint_state(device, pool):
        blocks = {storage_ptr(key): st.nbytes() for key, _, st in in_pool(pool)}
        return _CheckpointState(tuple(pool), blocks)

    def set_checkpoint_pool_state(device, state, stale_storages, live_storages):
        """`setCheckpointPoolState`: the pool as it was at the checkpoint, its blocks held by the
        storages still live (`live_storages`, by `_cdata`). The twin frees the pool's blocks that
        no live storage holds and gives each live storage that holds none (a replayed output) a
        block of its size in the pool; the checkpoint's own block layout is not restored (the
        blocks land where the allocator's best fit puts them)."""
        live = set(live_storages)
        for key, handle, _st in in_pool(state.pool):
            if key not in live:
                cap.device.free(handle)
                storages[key] = (None, storages[key][1])
        stream = pool_stream.get(state.pool)
        if stream is None:
            return
        for key in live_storages:
            entry = storages.get(key)
            if entry is None or entry[0] is not None:
                continue
            st = entry[1]()
            if st is None or not st.nbytes():
                continue
            previous = cap.pool_streams.get(cap.stream)
            cap.pool_streams[cap.stream] = private_stream(state.pool, stream)
            try:
                handle = cap._malloc_handle(st.nbytes(), "cudagraph_trees::checkpoint", "output")
            finally:
                if previous is None:
                    cap.pool_streams.pop(cap.stream, None)
                else:
                    cap.pool_streams[cap.stream] = previous
            storages[key] = (handle, entry[1])
        cap.note_compile_unmeasured(
            "CUDA graph trees' allocator checkpoint (a live output's block placed by best fit, "
            "not at its recorded address)"
        )

    def raw_delete(ptr):
        """`raw_delete` of a recorded block whose storage died since (its block, if a storage
        still holds one at that address)."""
        for key, (handle, ref) in list(storages.items()):
            st = ref()
            if handle is not None and st is not None and storage_ptr(key) == ptr:
                cap.device.free(handle)
                storages[key] = (None, ref)
                return

    p.set(C, "_cuda_getCheckpointState", get_checkpoint_state)
    p.set(C, "_cuda_setCheckpointPoolState", set_checkpoint_pool_state)
    p.set(C, "_cuda_cudaCachingAllocator_raw_delete", raw_delete)
    p.set(C, "_cuda_checkPoolLiveAllocations", lambda *a, **k: True)

    # ---- storages ---------------------------------------------------------------------------

    def storage_at(ptr, device, nbytes):
        """`_construct_storage_from_data_pointer`: a storage at `ptr` without a deleter (the
        allocator does not count it)."""
        with torch._C._DisableTorchDispatch():
            st = torch.UntypedStorage(nbytes, device="meta")
        register(st, None)
        _AT[st._cdata] = ptr
        return st

    def tensor_of(metadata, storage):
        """`_construct_CUDA_Tensor_From_Storage_And_Metadata`."""
        with torch._C._DisableTorchDispatch():
            t = torch.empty(0, dtype=metadata["dtype"], device="meta")
            t.set_(storage, metadata["storage_offset"], metadata["size"], metadata["stride"])
        return t

    def free_and_remove_deleter(key):
        """`_free_And_Remove_DeleterFn` of a storage (its `_cdata`, as a weak reference gives it):
        its block freed, the storage kept (its data pointer stays)."""
        entry = storages.get(key)
        if entry is None:
            return
        if entry[0] is not None:
            cap.device.free(entry[0])
        storages[key] = (None, entry[1])

    def ptrs_equal(tensors, ptrs, idxs):
        return all(tensors[i].data_ptr() == ptrs[i] for i in idxs)

    p.set(C, "_construct_storage_from_data_pointer", storage_at)
    p.set(C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", tensor_of)
    p.set(C, "_free_And_Remove_DeleterFn", free_and_remove_deleter)
    p.set(C, "_tensors_data_ptrs_at_indices_equal", ptrs_equal)
    p.set(C, "_set_storage_access_error_msg", lambda *a: None)
    p.set(C, "_set_storage_data_ptr_access_error_msg", lambda *a: None)
    p.set(C, "_has_Standard_Deleter", lambda key: storages.get(key, (None,))[0] is not None)
