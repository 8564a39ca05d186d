"""blind310/ky05 phase 1 on the H100: peak reserved 8,388,608 bytes over the twin's (allocated, requested,
reserved at the phase's end exact). This probe repeats ky05's set-up and its
`make_graphed_callables(stack, (sample,), pool=graph_pool_handle())` under bf16 autocast (cache off) and
`PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4`, with the allocator's history on, and prints every
segment event (alloc/free/map/unmap) in order: its size, its stream (numbered by first appearance), the
size of the request just before it, and how many allocations came before it; then the peak and current
reserved. The twin prints the same lines (`vramscope run --gpu h100 --quiet THIS`): the first line that
differs locates the 8 MiB.

Run on the GPU:  python3 validation/run/probes/ky69_ky05_graphed_callables_segments_probe.py
"""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:4"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3105)
dev = torch.device("cuda")
V, D, H, L, T = 32000, 512, 8, 8, 256
HD = D // H


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, HD).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


tok, posemb = nn.Embedding(V, D).to(dev), nn.Embedding(T, D).to(dev)
stack = nn.Sequential(*[Block() for _ in range(L)]).to(dev)
ln_f = nn.LayerNorm(D).to(dev)
params = (
    list(tok.parameters()) + list(posemb.parameters()) + list(stack.parameters()) + list(ln_f.parameters())
)
opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, foreach=True)
pool = torch.cuda.graph_pool_handle()
print(f"set-up reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}")
torch.cuda.reset_peak_memory_stats()

torch.cuda.memory._record_memory_history(max_entries=200000)
sample = torch.randn(24, T, D, device=dev, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(stack, (sample,), pool=pool)
del sample
trace = torch.cuda.memory._snapshot()["device_traces"][0]
torch.cuda.memory._record_memory_history(enabled=None)

streams, allocs, last_request, reserved = {}, 0, 0, 0
for e in trace:
    action = e["action"]
    if action == "alloc":
        allocs += 1
        last_request = e["size"]
    elif action.startswith("segment_"):
        sid = streams.setdefault(e["stream"], len(streams))
        sign = 1 if action in ("segment_alloc", "segment_map") else -1
        reserved += sign * e["size"]
        print(
            f"{action} {e['size']} stream#{sid} after_alloc#{allocs} request {last_request}",
            f"reserved {reserved}",
        )
print(f"graphed peak_reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}")
print(f"graphed peak_allocated {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
