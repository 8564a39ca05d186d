"""A GPT (768 wide, 8 layers, 12 heads, SDPA causal, tied embeddings) created directly on the GPU
through torch.set_default_device("cuda") and torch.set_default_dtype(torch.bfloat16), trained with
AdamW(fused=True) at batch 8 x 1024 for 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2305)
B, T, W, H, DEPTH, V = (2, 16, 32, 4, 1, 100) if SMALL else (8, 1024, 768, 12, 8, 50304)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_device(device)
torch.set_default_dtype(torch.bfloat16)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(W), nn.LayerNorm(W)
        self.qkv, self.out = nn.Linear(W, 3 * W), nn.Linear(W, W)
        self.fc, self.proj = nn.Linear(W, 4 * W), nn.Linear(4 * W, W)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(W, dim=-1)
        q, k, v = (t.view(B, T, H, W // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, W))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, W), nn.Embedding(T, W)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln = nn.LayerNorm(W)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T))
    loss = F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
