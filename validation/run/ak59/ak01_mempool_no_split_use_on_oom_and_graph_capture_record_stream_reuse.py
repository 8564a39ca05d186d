"""The allocator options of PyTorch 2.11 the twin modelled in session 59, each exercised alone:
`torch.cuda.MemPool(no_split=True)` (`setNoSplit`: `should_split` never splits a block of the pool,
so a 1 KiB tensor takes a whole 2 MiB small segment and a 5 MiB one a whole 20 MiB segment),
`torch.cuda.MemPool(use_on_oom=True)` (`setUseOnOOM`: a default-pool request that `alloc_block`
cannot serve, here under `set_per_process_memory_fraction`, takes a free block of the pool,
`try_mempool_fallback`, before any cached block is freed; a plain pool's cached block is kept and the
request runs out of memory), and `PYTORCH_CUDA_ALLOC_CONF=graph_capture_record_stream_reuse:True`
(a block freed during a CUDA graph capture while used on a side stream joined into the capture is
reused within the capture once the capturing stream has waited on the side stream,
`record_free_markers` / `free_safe_blocks_in_capture`; with the setting turned off at run time the
same capture makes a new block). The allocator's figures after each step."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "graph_capture_record_stream_reuse:True"

import torch  # noqa: E402

MIB = 1 << 20


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def blocks(pool_id):
    """A private pool's segments by size (then address), each its blocks as (MiB, state)."""
    segs = sorted(torch.cuda.memory_snapshot(pool_id), key=lambda s: (s["total_size"], s["address"]))
    return [[(b["size"] / MIB, b["state"]) for b in s["blocks"]] for s in segs]


def empty(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


# ---- no_split: every block of the pool handed out whole ------------------------------------------
pool = torch.cuda.MemPool(no_split=True)
with torch.cuda.use_mem_pool(pool):
    a = empty(1024)  # a 2 MiB small segment, whole
    b = empty(1024)  # another one
    c = empty(5 * MIB)  # a 20 MiB segment, whole
print("no_split pool blocks", blocks(pool.id))
report("no_split")
del a
with torch.cuda.use_mem_pool(pool):
    d = empty(4096)  # a's cached 2 MiB block again, whole
report("no_split_reuse")
del b, c, d
del pool
torch.cuda.empty_cache()
report("no_split_gone")

# ---- use_on_oom: a default request that cannot be cudaMalloc'ed takes the pool's free block ------
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(256 * MIB / total)
plain = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(plain):
    x = empty(100 * MIB)
del x  # cached in the plain pool, kept while it lives
y = empty(120 * MIB)
report("plain_pool")
try:
    z = empty(60 * MIB)
    print("plain_pool_60MiB served")
except torch.OutOfMemoryError:
    print("plain_pool_60MiB out of memory")
report("plain_pool_after")
del plain  # ~MemPool: its cached block freed
report("plain_pool_gone")
oom_pool = torch.cuda.MemPool(use_on_oom=True)
with torch.cuda.use_mem_pool(oom_pool):
    x = empty(100 * MIB)
del x
report("use_on_oom_pool")
z = empty(60 * MIB)  # 120 + 100 + 60 > 256 MiB: from the pool's 100 MiB block
print("use_on_oom pool blocks", blocks(oom_pool.id))
report("use_on_oom")
del z
w = empty(60 * MIB)  # the same again (its block went back to the pool)
print("use_on_oom pool blocks again", blocks(oom_pool.id))
report("use_on_oom_again")
del w, y
del oom_pool
torch.cuda.set_per_process_memory_fraction(1.0)
torch.cuda.empty_cache()
report("use_on_oom_gone")


# ---- graph_capture_record_stream_reuse -----------------------------------------------------------
def capture():
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    side = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        g.capture_begin()
        a = empty(4 * MIB)
        a.fill_(1)
        side.wait_stream(s)  # the side stream joins the capture
        with torch.cuda.stream(side):
            a.add_(1)
        a.record_stream(side)
        del a  # freed during the capture, in use on the side stream
        b = empty(4 * MIB)  # s has not waited on the side stream: not safe yet
        b.fill_(2)
        s.wait_stream(side)  # joined back
        c = empty(4 * MIB)  # safe now (with the setting)
        c.fill_(3)
        g.capture_end()
    torch.cuda.synchronize()
    # with the setting, c takes a's block: [c 4 MiB, b 4 MiB, 12 MiB free]; without it a's block
    # waits (pending free) and c takes the next: [a 4, b 4, c 4, 8 free]
    print("graph pool blocks", blocks(g.pool()))
    g.replay()
    torch.cuda.synchronize()
    return g, b, c


g, b, c = capture()
report("record_stream_reuse_on")
del g, b, c
torch.cuda.synchronize()
torch.cuda.empty_cache()
report("record_stream_reuse_on_gone")
torch.cuda.memory._set_allocator_settings("graph_capture_record_stream_reuse:False")
g, b, c = capture()
report("record_stream_reuse_off")
del g, b, c
torch.cuda.synchronize()
torch.cuda.empty_cache()
report("record_stream_reuse_off_gone")
