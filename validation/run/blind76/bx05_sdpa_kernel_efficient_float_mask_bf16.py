"""A hand-written 16-layer pre-norm decoder (1,024 wide, 16 heads) in bf16 weights whose attention
runs under `torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)` with an additive float
mask (a causal mask plus a per-row padding bias, broadcast over heads), AdamW(foreach), batch 8 of
1,024 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7605)
B, L, D, H, N, V = (2, 16, 32, 4, 2, 64) if SMALL else (8, 1024, 1024, 16, 16, 32000)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.n1(x)).view(x.shape[0], x.shape[1], 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(N))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids, mask):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.norm(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Net().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
backend = SDPBackend.EFFICIENT_ATTENTION if device == "cuda" else SDPBackend.MATH
causal = torch.full((L, L), float("-inf"), device=device).triu(1)
for step in range(2):
    ids = torch.randint(0, V, (B, L), device=device)
    pad = torch.zeros(B, 1, 1, L, device=device)
    pad[:, :, :, L - L // 8 :] = -1e4
    mask = (causal + pad).to(torch.bfloat16)
    with sdpa_kernel(backend):
        logits = model(ids, mask)
    loss = F.cross_entropy(logits.view(-1, V).float(), ids.view(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, pad, mask, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
