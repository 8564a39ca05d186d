"""Session 62 (helper m276): what the twin's TunableOp rule takes from PyTorch's source only, not yet
from a GPU (plain `python3`, one GPU, a few seconds). pt62_tunableop_and_csr_backward_probe measured `mm`,
`addmm` (gemm_and_bias) and a weight-gradient `mm` in bf16; here: `bmm` and `baddbmm` (`bgemm` ->
`GemmStridedBatchedTunableOp`: copies of stride x batch elements, GemmCommon.h), a one-batch `bmm` (which
`baddbmm_out_cuda_impl` sends to `gemm`), fp32 and fp16 `mm` (other TypeNames, new signatures), an
operand sliced from a wider matrix (`GetSizeB`'s strided extent: leading dimension 3,072), and a 16 MB
rotating buffer. Each case prints the caching allocator's alloc/free events inside the call (runs of
equal events as `+Nxk`) and the call's peak above what was allocated before, as pt62's probe does.

    python3 validation/run/probes/m276_tunableop_bmm_probe_s62.py

The twin's answer: `vramscope run --gpu h100` of the same file, to be compared line by line.
"""

import os
import tempfile

import torch

dev = "cuda"
torch.manual_seed(0)


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    # long runs of equal events shortened: "+N x K"
    short = []
    for e in ev:
        if short and short[-1][0] == e:
            short[-1][1] += 1
        else:
            short.append([e, 1])
    text = " ".join(e if k == 1 else f"{e}x{k}" for e, k in short)
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {text}", flush=True)
    return out


def batched(b, m, k, n):
    x = torch.randn(b, m, k, device=dev, dtype=torch.bfloat16)
    y = torch.randn(b, k, n, device=dev, dtype=torch.bfloat16)
    z = torch.randn(b, m, n, device=dev, dtype=torch.bfloat16)
    yt = y.transpose(1, 2).contiguous().transpose(1, 2)  # column-major batches: another layout
    events(f"bmm {b}x{m}x{k}@{k}x{n} tune", lambda: torch.bmm(x, y))
    events(f"bmm {b}x{m}x{k}@{k}x{n} lookup", lambda: torch.bmm(x, y))
    events(f"bmm {b}x{m}x{k}@{k}x{n} column-major tune", lambda: torch.bmm(x, yt))
    events(f"baddbmm {b}x{m}x{k}@{k}x{n} lookup", lambda: torch.baddbmm(z, x, y))


def one_batch():
    x = torch.randn(1, 768, 512, device=dev, dtype=torch.bfloat16)
    y = torch.randn(1, 512, 384, device=dev, dtype=torch.bfloat16)
    events("bmm 1x768x512@512x384 tune", lambda: torch.bmm(x, y))


def dtype_case(dt):
    a = torch.randn(2048, 1024, device=dev, dtype=dt)
    w = torch.randn(1536, 1024, device=dev, dtype=dt)
    events(f"mm {dt} 2048x1024@1024x1536 tune", lambda: a @ w.t())
    events(f"mm {dt} 2048x1024@1024x1536 lookup", lambda: a @ w.t())


def sliced():
    big = torch.randn(2048, 3072, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    events("mm slice[:, :1024] 2048x1024@1024x1024 tune", lambda: big[:, :1024] @ w)


def rotating_16():
    torch.cuda.tunable.set_rotating_buffer_size(16)
    a = torch.randn(1000, 1000, device=dev, dtype=torch.bfloat16)
    events("mm rot=16 1000x1000@1000x1000 tune", lambda: a @ a)


torch.backends.cuda.matmul.allow_tf32 = False
tmp = tempfile.mkdtemp(prefix="tunableop_bmm_probe_")
torch.cuda.tunable.set_filename(os.path.join(tmp, "r.csv"), insert_device_ordinal=True)
torch.cuda.tunable.set_max_tuning_iterations(5)
torch.cuda.tunable.set_max_tuning_duration(5)
torch.cuda.tunable.enable(True)
torch.cuda.tunable.tuning_enable(True)
print("rotating default (bytes)", torch.cuda.tunable.get_rotating_buffer_size())
batched(16, 256, 64, 256)
batched(32, 1024, 128, 1024)
one_batch()
dtype_case(torch.float32)
dtype_case(torch.float16)
sliced()
rotating_16()
print("tuned signatures", len(torch.cuda.tunable.get_results()))
