"""A hand-written decoder-only transformer with ALiBi: per-head linear distance biases plus the causal
-inf triangle built once as a float (B, H, T, T) mask, passed to SDPA with attn_mask and dropout_p=0.1
in training; pre-LayerNorm, GELU MLP, tied head; fp32 weights under bf16 autocast, Adam with amsgrad,
batch 8 x 512, width 512, 8 layers, 8 heads, 2 steps."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1505)
VOCAB, WIDTH, LAYERS, HEADS, BATCH, SEQ = (300, 32, 1, 2, 2, 16) if SMALL else (16000, 512, 8, 8, 8, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"


def alibi_mask(batch, heads, seq, device):
    slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)], device=device)
    pos = torch.arange(seq, device=device)
    dist = (pos[None, :] - pos[:, None]).float()
    bias = slopes[:, None, None] * dist[None]
    causal = torch.full((seq, seq), float("-inf"), device=device).triu(1)
    return (bias + causal).unsqueeze(0).expand(batch, -1, -1, -1).contiguous()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask.to(q.dtype), dropout_p=0.1 if self.training else 0.0
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        nn.init.normal_(self.emb.weight, std=1 / math.sqrt(WIDTH))

    def forward(self, ids, mask):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, mask)
        return self.ln(x) @ self.emb.weight.t()


model = Model().to(device).train()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, amsgrad=True)
mask = alibi_mask(BATCH, HEADS, SEQ, device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(ids[:, :-1], mask)
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
