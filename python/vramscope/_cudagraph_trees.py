"""Inductor's CUDA graph trees (`torch.compile(mode="reduce-overhead")`) on the simulated GPU.

PyTorch's own `torch/_inductor/cudagraph_trees.py` runs unchanged: its tree manager decides
warm-up, recording and replay, generations, liveness checks and re-recording as on the GPU. What it
asks of the CUDA caching allocator and of storages (the `torch._C` functions below) is answered by
the twin: allocation into the tree's private pool on its stream, a storage's data pointer, a
storage without a deleter at a recorded address (a replayed output, which the allocator does not
count), freeing a storage's block without freeing the storage, and the pool's checkpoint.
"""

from __future__ import annotations

import pickle
import weakref

import torch

from . import _cuda, _graph_values

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


#: the small pool's largest request (`kSmallSize`, CUDACachingAllocator.cpp)
SMALL_SIZE = 1 << 20


class _CheckpointState:
    """`_cuda_getCheckpointState`'s allocator state of a private pool: its segments in the order
    `getCheckpointState` lists them, each as (whether it is the small pool's, its blocks in address
    order as (size, allocated, the data pointer of the storage holding it or None, address))."""

    __slots__ = ("pool", "segments")

    def __init__(self, pool, segments):
        self.pool = pool
        self.segments = segments


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
    #: blocks a checkpoint rebuilt allocated for outputs dead since, by data pointer, until the
    #: tree manager's `raw_delete`
    restored: dict = {}
    #: blocks a checkpoint rebuilt allocated that no output held (the next checkpoint frees them)
    loose: list = []

    def begin_allocate_to_pool(device, pool):
        """`beginAllocateCurrentThreadToPool`: what the thread allocates comes from `pool`; the
        tree manager allocates on its own stream only (`_use_cuda_memory_pool_manager`)."""
        pool_stream[tuple(pool)] = cap.stream
        cap.pool_streams[cap.stream] = private_stream(pool, cap.stream)
        cap.device.register_private_stream(cap.pool_streams[cap.stream], _cuda._pool_hash(pool), cap.stream)
        cap.device.begin_allocate_to_pool()

    def end_allocate_to_pool(device, pool):
        cap.device.end_allocate_to_pool()
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

    def segments_of(pool):
        """The pool's segments (`memory_snapshot`'s), in `get_private_pool_head_blocks`' order
        (CUDACachingAllocator.cpp): those whose first block is allocated first (PyTorch walks an
        unordered set: the twin takes address order), then the free ones of the small pool, then
        of the large, each by (first block's size, address) as the pools' block sets order them."""
        stream = pool_stream.get(tuple(pool))
        if stream is None:
            return []
        private = private_stream(pool, stream)
        segs = [
            seg for seg in pickle.loads(cap.device.snapshot_pickle())["segments"] if seg["stream"] == private
        ]

        def key(seg):
            head = seg["blocks"][0]
            if head["state"] == "active_allocated":
                return (0, 0, seg["address"])
            return (1 if seg["segment_type"] == "small" else 2, head["size"], seg["address"])

        return sorted(segs, key=key)

    def get_checkpoint_state(device, pool):
        """`getCheckpointState`: the pool's segments and blocks now, each allocated block with
        the data pointer of the storage holding it."""
        ptr_at = {}
        for key, handle, _st in in_pool(pool):
            addr = cap.device.addr_of(handle)
            if addr is not None:
                ptr_at[addr] = storage_ptr(key)
        segments = [
            (
                seg["segment_type"] == "small",
                [
                    (b["size"], b["state"] == "active_allocated", ptr_at.get(b["address"]), b["address"])
                    for b in seg["blocks"]
                ],
            )
            for seg in segments_of(pool)
        ]
        return _CheckpointState(tuple(pool), segments)

    def set_checkpoint_pool_state(device, state, stale_storages, live_storages):
        """`setCheckpointPoolState` (CUDACachingAllocator.cpp): the pool's allocated blocks are
        freed, then each checkpointed segment is rebuilt as `setSegmentStateToCheckpoint` does:
        every block allocated in address order (the splits come back), then those free at the
        checkpoint freed; the blocks the live storages (`_cdata`s) held are theirs again, the
        others freed after (the caller's `raw_delete` of outputs dead since). The twin rebuilds a
        segment through its allocator's best fit, which finds each block where the checkpoint had
        it when the pool is as the checkpoint left it; where not, named unmeasured."""
        stream = pool_stream.get(state.pool)
        if stream is None:
            return
        for key, handle, _st in in_pool(state.pool):
            cap.device.free(handle)
            storages[key] = (None, storages[key][1])
        for handle in [*restored.values(), *loose]:
            cap.device.free(handle)
        restored.clear()
        loose.clear()
        live = {}
        for key in live_storages:
            entry = storages.get(key)
            if entry is not None and entry[1]() is not None:
                live[storage_ptr(key)] = key
        previous = cap.pool_streams.get(cap.stream)
        cap.pool_streams[cap.stream] = private_stream(state.pool, stream)
        moved = False

        def alloc(n):
            return cap._malloc_handle(n, "cudagraph_trees::setCheckpointPoolState", "output")

        try:
            for small, blocks in state.segments:
                made = []
                for size, allocated, ptr, addr in blocks:
                    # a free block of a small segment larger than the small pool's requests (a
                    # whole free 2 MiB segment): taken as 1 MiB requests, which the small pool serves
                    pieces = [SMALL_SIZE] * (size // SMALL_SIZE) if small and size > SMALL_SIZE else []
                    if pieces and size % SMALL_SIZE:
                        pieces.append(size % SMALL_SIZE)
                    handles = [alloc(n) for n in pieces or [size]]
                    # (a whole free segment found in another as large changes nothing)
                    whole_free = len(blocks) == 1 and not allocated
                    moved |= cap.device.addr_of(handles[0]) != addr and not whole_free
                    made.append((handles, allocated, ptr))
                for handles, allocated, ptr in made:
                    handle = handles[0]
                    if not allocated:
                        for h in handles:
                            cap.device.free(h)
                    elif ptr in live:
                        key = live.pop(ptr)
                        storages[key] = (handle, storages[key][1])
                    elif ptr is not None:
                        # an output dead since: the caller's `raw_delete` frees it
                        restored[ptr] = handle
                    else:
                        # a block no output held: it stays allocated, as in the GPU's pool
                        loose.append(handle)
            for key in live.values():
                # a live storage the checkpoint has no block for: a block of its size
                st = storages[key][1]()
                if st is not None and st.nbytes():
                    handle = cap._malloc_handle(
                        st.nbytes(), "cudagraph_trees::setCheckpointPoolState", "output"
                    )
                    storages[key] = (handle, storages[key][1])
                    moved = True
        finally:
            if previous is None:
                cap.pool_streams.pop(cap.stream, None)
            else:
                cap.pool_streams[cap.stream] = previous
        if moved:
            cap.note_compile_unmeasured(
                "CUDA graph trees' allocator checkpoint (a block not rebuilt at its checkpointed address)"
            )

    def raw_delete(ptr):
        """`raw_delete` of a recorded block whose storage died since (`data_ptrs_dead_since_invocation`):
        the block the checkpoint rebuilt at that address, else a storage's still there."""
        handle = restored.pop(ptr, None)
        if handle is not None:
            cap.device.free(handle)
            return
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

    def node_run(trees):
        """`CUDAGraphNode.run` (a replay) naming its inputs to the graph's replay, the tensors at
        the addresses its kernels read (the static inputs, and the buffers the others were
        copied into), and its outputs to the values the replay wrote (`_graph_values`)."""
        original = trees.CUDAGraphNode.run

        def run(self, new_inputs):
            graph = self.graph
            graph._vs_sources = [*new_inputs, *self.reconstructed_inputs]
            try:
                outputs = original(self, new_inputs)
            finally:
                graph._vs_sources = ()
            shadow = getattr(graph, "_vs_shadow", None)
            if shadow is not None:
                graph._vs_shadow = None
                _graph_values.apply(shadow, outputs)
            return outputs

        p.set(trees.CUDAGraphNode, "run", run)

    p.when_imported("torch._inductor.cudagraph_trees", node_run)
    p.set(C, "_construct_storage_from_data_pointer", storage_at)
    p.set(C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", tensor_of)
    p.set(C, "_free_And_Remove_DeleterFn", free_and_remove_deleter)
    p.set(C, "_tensors_data_ptrs_at_indices_equal", ptrs_equal)
    p.set(C, "_set_storage_access_error_msg", lambda *a: None)
    p.set(C, "_set_storage_data_ptr_access_error_msg", lambda *a: None)
    p.set(C, "_has_Standard_Deleter", lambda key: storages.get(key, (None,))[0] is not None)
