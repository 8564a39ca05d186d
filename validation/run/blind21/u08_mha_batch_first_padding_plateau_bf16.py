"""A classifier of nn.MultiheadAttention(batch_first=True) blocks (768 wide, 12 heads, 4 blocks,
LayerNorm, GELU MLP) under bf16 autocast with a boolean key_padding_mask (the last quarter of every
sequence padded), need_weights=False, clip_grad_norm_, AdamW and ReduceLROnPlateau fed loss.item();
batch 16 x 512, 3 steps, then eval with need_weights=True, average_attn_weights=False under no_grad;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2108)
B, T, W, H, DEPTH = (2, 16, 32, 4, 1) if SMALL else (16, 512, 768, 12, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(W)
        self.attn = nn.MultiheadAttention(W, H, batch_first=True)
        self.ln2 = nn.LayerNorm(W)
        self.mlp = nn.Sequential(nn.Linear(W, 4 * W), nn.GELU(), nn.Linear(4 * W, W))

    def forward(self, x, pad, weights=False):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, key_padding_mask=pad, need_weights=weights, average_attn_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x)), w


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30000, W)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.head = nn.Linear(W, 5)

    def forward(self, ids, pad, weights=False):
        x = self.embed(ids)
        maps = []
        for blk in self.blocks:
            x, w = blk(x, pad, weights)
            maps.append(w)
        return self.head(x[:, 0]), maps


model = Net().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
pad = torch.zeros(B, T, dtype=torch.bool, device=device)
pad[:, 3 * T // 4 :] = True
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, 30000, (B, T), device=device)
    y = torch.randint(0, 5, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits, _ = model(ids, pad)
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step(loss.item())
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    logits, maps = model(torch.randint(0, 30000, (B, T), device=device), pad, weights=True)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
