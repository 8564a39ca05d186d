"""A GPT-style trunk (1024 wide, 6 layers, SDPA causal) in bf16 whose 128,000-token output layer and
cross-entropy are computed over chunks of 1024 positions, each chunk under
torch.utils.checkpoint(use_reentrant=False) so no chunk's logits are kept for backward (the
memory-saving loss of long-vocabulary fine-tunes); AdamW, batch 4 x 2048, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2501)
B, T, W, H, DEPTH, V, CHUNK = (2, 16, 32, 4, 1, 300, 8) if SMALL else (4, 2048, 1024, 16, 6, 128000, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(W), nn.LayerNorm(W)
        self.qkv, self.out = nn.Linear(W, 3 * W, bias=False), nn.Linear(W, W, bias=False)
        self.fc, self.proj = nn.Linear(W, 4 * W, bias=False), nn.Linear(4 * W, W, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(W, dim=-1)
        q, k, v = (t.view(B, T, H, W // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, W))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


emb = nn.Embedding(V, W)
trunk = nn.Sequential(*[Block() for _ in range(DEPTH)], nn.LayerNorm(W))
head = nn.Linear(W, V, bias=False)
model = nn.ModuleList([emb, trunk, head]).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)


def chunk_loss(h, y):
    return F.cross_entropy(head(h).float(), y, reduction="sum")


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T), device=device)
    h = trunk(emb(ids)).flatten(0, 1)
    y = ids.flatten()
    loss = sum(
        checkpoint(chunk_loss, h[i : i + CHUNK], y[i : i + CHUNK], use_reentrant=False)
        for i in range(0, B * T, CHUNK)
    ) / (B * T)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
