"""An attention-kernel benchmark as users write them: `torch.utils.benchmark.Timer` timings of causal
scaled-dot-product attention forward + backward under each SDPA backend forced with
`torch.nn.attention.sdpa_kernel`, with the peak memory of each backend read between runs (bf16, batch 4,
16 heads, head dim 128, 4,096 tokens; inputs and output gradients seeded).
Each phase builds fresh q, k, v (requires_grad) and the output gradient, then `Timer(stmt="fwd_bwd()",
globals=...).timeit(5)` (which first runs a warm-up of 2 calls), then frees them:
Phase 1 FLASH_ATTENTION, phase 2 EFFICIENT_ATTENTION, phase 3 CUDNN_ATTENTION, phase 4 MATH (the reference:
the full 4,096 x 4,096 scores materialised in bf16 for forward and backward).
Phase 5, chunked prefill: 1,024 new queries against 4,096 keys with
`torch.nn.attention.bias.causal_lower_right` (no backend forced: SDPA's own choice), forward only under
`torch.no_grad()`, `Timer.timeit(10)`; then `torch.utils.benchmark.Compare` prints the table.
5 phases."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.utils import benchmark

torch.manual_seed(2935)
dev = "cuda"
B, NH, S, HD = 4, 16, 4096, 128
dt = torch.bfloat16


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def qkv(q_len=S, kv_len=S, grad=True):
    q = torch.randn(B, NH, q_len, HD, device=dev, dtype=dt, requires_grad=grad)
    k = torch.randn(B, NH, kv_len, HD, device=dev, dtype=dt, requires_grad=grad)
    v = torch.randn(B, NH, kv_len, HD, device=dev, dtype=dt, requires_grad=grad)
    return q, k, v


def make_fwd_bwd(backend, q, k, v, dout):
    def fwd_bwd():
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(dout)
        q.grad = k.grad = v.grad = None

    return fwd_bwd


results = []
for backend in (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.MATH,
):
    q, k, v = qkv()
    dout = torch.randn(B, NH, S, HD, device=dev, dtype=dt)

    fwd_bwd = make_fwd_bwd(backend, q, k, v, dout)

    t = benchmark.Timer(
        stmt="fwd_bwd()",
        globals={"fwd_bwd": fwd_bwd},
        label="causal sdpa fwd+bwd",
        sub_label=f"B{B} H{NH} S{S} D{HD}",
        description=backend.name,
    )
    m = t.timeit(5)
    results.append(m)
    print(backend.name, "peak MiB", round(torch.cuda.max_memory_allocated() / 2**20, 1))
    del q, k, v, dout, fwd_bwd, t, m
    report(f"sdpa_{backend.name.lower()}_fwd_bwd_timer")

# --- phase 5: chunked prefill with a lower-right causal bias ----------------------------------------------
q, k, v = qkv(q_len=1024, grad=False)
bias = causal_lower_right(1024, S)


t = benchmark.Timer(
    stmt="with torch.no_grad(): F.scaled_dot_product_attention(q, k, v, attn_mask=bias)",
    globals={"torch": torch, "F": F, "q": q, "k": k, "v": v, "bias": bias},
    label="causal sdpa fwd+bwd",
    sub_label=f"prefill 1024 of {S}",
    description="causal_lower_right",
)
results.append(t.timeit(10))
benchmark.Compare(results).print()
del q, k, v, bias, t
report("causal_lower_right_chunked_prefill")
