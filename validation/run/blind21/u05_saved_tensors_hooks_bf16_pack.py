"""A pre-LN transformer in fp32 (SDPA causal attention, GELU MLP, 1024 wide, 6 layers, 16 heads) whose
saved activations are compressed with torch.autograd.graph.saved_tensors_hooks (pack: floating
tensors cast to bf16; unpack: back to their dtype); 2 steps without the hooks, then 2 with them; AdamW
foreach, batch 8 x 1024; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2105)
B, T, W, H, DEPTH = (2, 16, 32, 4, 1) if SMALL else (8, 1024, 1024, 16, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(W)
        self.qkv = nn.Linear(W, 3 * W)
        self.out = nn.Linear(W, W)
        self.ln2 = nn.LayerNorm(W)
        self.fc = nn.Linear(W, 4 * W)
        self.proj = nn.Linear(4 * W, W)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(W, dim=-1)
        q, k, v = (t.view(B, T, H, W // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, W))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


def pack(t):
    return (t.dtype, t.to(torch.bfloat16)) if t.is_floating_point() else (None, t)


def unpack(packed):
    dtype, t = packed
    return t if dtype is None else t.to(dtype)


model = nn.Sequential(*[Block() for _ in range(DEPTH)], nn.LayerNorm(W), nn.Linear(W, 256)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    x = torch.randn(B, T, W, device=device)
    target = torch.randint(0, 256, (B, T), device=device)
    if step < 2:
        loss = F.cross_entropy(model(x).flatten(0, 1), target.flatten())
    else:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = F.cross_entropy(model(x).flatten(0, 1), target.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
