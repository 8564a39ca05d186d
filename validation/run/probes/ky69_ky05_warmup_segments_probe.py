"""blind310/ky05 phase 1, second look (after ky69_ky05_graphed_callables_segments_probe.py, whose
first difference is the `empty_cache()` of `torch.cuda.graph.__enter__`: the H100 keeps a 20 MiB warm-up
segment, the twin a 12 MiB one). This probe wraps `torch.cuda.empty_cache` and, at its first call
(make_graphed_callables' first capture), prints the warm-up stream's segments in address order before the
cache is emptied: each segment's size and its blocks (size, and A for allocated or f for free) in address
order. The twin prints the same lines (`vramscope run --gpu h100 --quiet THIS`): the segment that differs
shows which live block sits where.

Run on the GPU:  python3 validation/run/probes/ky69_ky05_warmup_segments_probe.py
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

_real_empty_cache = torch.cuda.empty_cache
_calls = [0]


def _empty_cache_with_layout():
    _calls[0] += 1
    if _calls[0] == 1:
        segs = [s for s in torch.cuda.memory_snapshot() if s["stream"] != 0]
        for s in sorted(segs, key=lambda s: s["address"]):
            blocks = " ".join(
                f"{b['size']}{'A' if b['state'] == 'active_allocated' else 'f'}" for b in s["blocks"]
            )
            print(f"segment {s['total_size']} stream {'side' if s['stream'] else 0}: {blocks}")
    _real_empty_cache()


torch.cuda.empty_cache = _empty_cache_with_layout
sample = torch.randn(24, T, D, device=dev, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(stack, (sample,), pool=pool)
del sample
print(f"graphed peak_reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}")
