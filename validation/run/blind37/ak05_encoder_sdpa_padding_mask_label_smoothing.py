"""A hand-written post-norm encoder classifier with SDPA under a boolean key-padding mask
(batch, 1, 1, seq), bf16 autocast over fp32 weights, token-level cross entropy with label
smoothing 0.1 and ignore_index on padded positions, AdamW (foreach), 768 wide, 6 layers, batch
16 at 512, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3705)
if SMALL:
    V, D, L, NH, B, S = 64, 32, 2, 4, 2, 16
else:
    V, D, L, NH, B, S = 30000, 768, 6, 12, 16, 512


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln1 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.ln2 = nn.LayerNorm(D)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(b, s, D)))
        return self.ln2(x + self.ff(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(S, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V)

    def forward(self, ids, keep):
        x = self.emb(ids) + self.pos.weight[: ids.shape[1]]
        mask = keep[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Encoder().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S), device=device)
    lengths = torch.arange(B, device=device) * (S // B) + S // B
    keep = torch.arange(S, device=device)[None, :] < lengths[:, None]
    labels = ids.masked_fill(~keep, -100)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(ids, keep)
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, lengths, keep, labels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
