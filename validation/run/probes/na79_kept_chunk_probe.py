"""Probe (session 79, helper na): which event makes the driver take a piece of the newest chunk's hole.

blind349/mn05's H100 history (fixtures/run/history_mn05_s79_h100.pickle.xz): the 954 MiB segment made for
micro-batch 16's `nll_loss_backward` (trace entry 5249: a 1,000,341,504-byte segment, a 960 MiB chunk with
a 6 MiB hole at its top, the newest chunk) is freed by the OOM's `release_cached_blocks` (entry 14774),
yet the next 45 segments (entries 15150-15485) are packed into its range from its low end: rule 2 of
docs/driver-placement.md (a hole of a chunk that was not released), where rule 3 releases a chunk whose
segments are all freed (the twin puts the first at +512 MiB over the model's first segment, and from there
on ties between equal free blocks go the other way: allocated -811,008 from phase 1, one more allocation
retry in phase 5). So something that is not a segment took a piece of that chunk's 6 MiB hole between
entries 5249 and 14774 (the first backward's ops, on the autograd engine's thread). In the twin, a piece
placed by rule 2 when that thread creates its cuBLAS handle makes all 7 phases of mn05 exact; session 22's
H200 probe (validation/va_plain/syn.py, fixtures/va_maps/plain_s22_h200.tar.xz `syn.out`) saw no piece
taken at the thread's first matrix product but one 2 MiB piece taken in a second backward (its first
in-place `add_`: a kernel module's first load?).

One process. The caching allocator is kept from making segments (a cached 64 MiB block for a cuBLAS
workspace, cached small blocks); a raw `cudaMalloc` of 500 MiB makes the newest chunk (512 MiB, a 12 MiB
hole). After each event a raw 2 MiB `cudaMalloc` probes the hole (then freed): it lands at the hole's low
end, so when it moves up something took the space below it. Each line: the event, and the probe's offset
from the 500 MiB segment's end in MiB (0 = nothing taken yet; +2 = 2 MiB taken). Events: the autograd
thread's start (an elementwise backward), its first matrix product, a second backward (accumulating
gradients), a Python thread's first matrix product (a new cuBLAS handle outside autograd), then ops whose
kernels' modules are not loaded yet, one by one, then a small BERT MLM (fp16 autocast, GradScaler) forward
and backward with the probe after every aten op (a dispatch mode; on the autograd thread too): the ops
after which the probe moved are printed. Last, in a fresh process, the script of
python/tests/test_capture.py's `test_a_later_cublas_handle_reserves_64_mib_before_its_workspace`: its two
cuBLAS workspaces' offsets from the anchor (the twin: [-350, -244]; [-350, -242] if the autograd thread's
handle takes 2 MiB by rule 2).

Run: python3 probes/na79_kept_chunk_probe.py (from validation/run); < 60 s, < 2 GB. Plain python3 (no
twin lines: the twin lays none of these pieces out but the first kernel's 2 MiB and the first handle's).
"""

import ctypes
import subprocess
import sys
import threading

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

MIB = 1 << 20


def cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                return ctypes.CDLL(line.split()[-1])


torch.cuda.init()
rt = cudart()
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
rt.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]


def free_mib():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) == 0
    return f.value / MIB


def malloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p.value


a = torch.randn(1024, 1024, device="cuda")
(a @ a).sum().item()  # the first kernels, the main thread's cuBLAS handle and workspace
w = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
s = [torch.empty(64 * 1024, device="cuda") for _ in range(24)]
del w, s  # cached: a 128 MiB block (other handles' workspaces) and small segments
torch.cuda.synchronize()
big = malloc(500 * MIB)
END = big + 500 * MIB
last = [None]


def probe():
    """The probe's offset from the 500 MiB segment's end (MiB), and whether the 2 MiB below it lie in
    no segment the process knows of (the caching allocator's or the 500 MiB one): a piece taken by
    something else."""
    torch.cuda.synchronize()
    p = malloc(2 * MIB)
    assert rt.cudaFree(ctypes.c_void_p(p)) == 0
    segs = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()] + [(big, 500 * MIB)]
    known = any(a <= p - 2 * MIB and p <= a + n for a, n in segs) or p % (32 * MIB) == 0
    return (p - END) / MIB, not known


def event(tag):
    off, unknown = probe()
    moved = "" if off == last[0] else "   <- moved"
    last[0] = off
    note = " (no segment below it)" if unknown else ""
    print(f"{tag}: probe at {off:+.0f}{note}; device free {free_mib():.0f} MiB{moved}", flush=True)


event("start (500 MiB chunk's hole)")
y = torch.randn(1024, device="cuda", requires_grad=True)
(y * y).sum().backward()
event("autograd thread started (elementwise backward)")
lin = torch.nn.Linear(1024, 1024, device="cuda")
xx = torch.randn(64, 1024, device="cuda", requires_grad=True)
lin(xx).sum().backward()
event("autograd thread's first matrix product (its cuBLAS handle)")
lin(xx).sum().backward()
event("second backward (gradients accumulated)")
th = threading.Thread(target=lambda: (xx.detach() @ lin.weight.detach().t()).sum().item())
th.start()
th.join()
event("a Python thread's first matrix product (another cuBLAS handle)")

x = torch.rand(4096, device="cuda")
i = torch.randint(0, 1024, (4096,), device="cuda")
OPS = {
    "sort": lambda: x.sort(),
    "cumsum": lambda: x.cumsum(0),
    "topk": lambda: x.topk(8),
    "bessel_j0": lambda: torch.special.bessel_j0(x),
    "erfinv": lambda: torch.erfinv(x * 0.5),
    "lgamma": lambda: torch.lgamma(x + 1),
    "log_softmax": lambda: x.view(64, 64).log_softmax(-1),
    "layer_norm": lambda: F.layer_norm(x.view(64, 64), (64,)),
    "gelu": lambda: F.gelu(x),
    "embedding": lambda: F.embedding(i % 64, x.view(64, 64)),
    "index_add": lambda: torch.zeros(1024, device="cuda").index_add_(0, i % 1024, x),
    "unique": lambda: torch.unique(i),
    "bincount": lambda: torch.bincount(i),
    "nonzero": lambda: (x > 0.5).nonzero(),
    "fft": lambda: torch.fft.rfft(x),
    "conv2d": lambda: F.conv2d(x.view(1, 4, 32, 32), torch.randn(8, 4, 3, 3, device="cuda")),
    "max_pool2d": lambda: F.max_pool2d(x.view(1, 4, 32, 32), 2),
    "interpolate": lambda: F.interpolate(x.view(1, 4, 32, 32), scale_factor=2.0, mode="bilinear"),
    "dropout": lambda: F.dropout(x, 0.1),
    "bmm_half": lambda: torch.bmm(x.view(4, 32, 32).half(), x.view(4, 32, 32).half()),
    "sdpa": lambda: F.scaled_dot_product_attention(*[x.view(1, 2, 32, 64).half()] * 3),
}
for name, fn in OPS.items():
    fn()
    event(f"op {name}")


class Probe(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        off, unknown = probe()
        if off != last[0]:
            where = "autograd thread" if threading.current_thread() is not threading.main_thread() else "main"
            note = " (no segment below it)" if unknown else ""
            print(f"  bert: probe at {off:+.0f}{note} after {func} ({where})", flush=True)
            last[0] = off
        return out


from transformers import BertConfig, BertForMaskedLM  # noqa: E402

cfg = BertConfig(
    vocab_size=30522,
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=128,
    attn_implementation="sdpa",
)
model = BertForMaskedLM(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda")
ids = torch.randint(1000, 30522, (4, 128), device="cuda")
labels = torch.full_like(ids, -100)
labels[:, ::7] = ids[:, ::7]
attn = torch.ones(4, 128, dtype=torch.long, device="cuda")
attn[2:, 112:] = 0
event("bert built")
with Probe():
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
event("bert step done")

# python/tests/test_capture.py's test_a_later_cublas_handle_reserves_64_mib_before_its_workspace, on
# the GPU (a fresh process): the two cuBLAS workspaces' offsets from the anchor. The twin gives
# [-350, -244] (the later handle's 64 MiB, no 2 MiB); [-350, -242] if that handle also takes 2 MiB
# by rule 2 (the context's range being the newest chunk with a hole there)
CASE = """
import torch
z = torch.zeros(16, device="cuda")
x = torch.randn(64, 128, device="cuda", requires_grad=True)
w = torch.randn(128, 128, device="cuda", requires_grad=True)
(x @ w).sum().backward()
torch.cuda.synchronize()
segs = torch.cuda.memory_snapshot()
anchor = min(s["address"] for s in segs if s["total_size"] == 2 << 20) + (2 << 20)
print(sorted((s["address"] - anchor) >> 20 for s in segs if s["total_size"] == 32 << 20))
"""
r = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, timeout=60)
print(f"test_a_later_cublas_handle's script: workspaces at {r.stdout.strip() or r.stderr[-300:]}", flush=True)

# mn05's pattern in miniature (the twin test this probe would back): a 1,000,341,504-byte segment (a 960
# MiB chunk, 6 MiB free at its top) is the newest chunk at the autograd thread's first matrix product;
# freed and `empty_cache()`d, then a 32 MiB segment: at offset 0 when the chunk was kept (something took
# a piece of its hole), elsewhere when released. The twin on main: [960, 1130, 1162] (released); with
# 2 MiB taken by rule 2 at the thread's cuBLAS handle: [0, 960, 1130]. The 32 MiB segments' offsets
# from the big one, in MiB (the other two are the cuBLAS workspaces)
KEPT = """
import torch
a = torch.randn(256, 256, device="cuda")
b = a @ a
lin = torch.nn.Linear(256, 256, device="cuda")
inp = torch.randn(64, 256, device="cuda")
spare = [torch.empty(64 << 10, device="cuda") for _ in range(16)]
del spare
x = torch.empty(1000144896, dtype=torch.uint8, device="cuda")
lin(inp).sum().backward()
torch.cuda.synchronize()
xa = x.data_ptr()
del x
torch.cuda.empty_cache()
y = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(sorted((s["address"] - xa) >> 20 for s in torch.cuda.memory_snapshot() if s["total_size"] == 32 << 20))
"""
r = subprocess.run([sys.executable, "-c", KEPT], capture_output=True, text=True, timeout=60)
print(f"kept chunk in miniature: 32 MiB segments at {r.stdout.strip() or r.stderr[-300:]}", flush=True)
