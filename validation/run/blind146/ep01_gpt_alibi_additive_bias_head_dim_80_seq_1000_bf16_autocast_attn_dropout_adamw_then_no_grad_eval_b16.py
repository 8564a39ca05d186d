"""A GPT with ALiBi (Press et al.) written as users write it on top of SDPA: no position embedding,
the per-head linear biases slope * (j - i) plus the causal -inf built once in fp32 as one additive
(1, H, L, L) mask, passed as attn_mask (SDPA under autocast casts it to bf16 with q, k and v);
d_model 1280, 16 heads of 80, 8 blocks, sequence 1000 (not a multiple of 64), attention dropout 0.1
in training; bf16 autocast, AdamW (foreach), batch 8, 3 steps, then a no_grad evaluation at batch 16
with dropout off; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14601)
D, H, NL, L, B, EB, V = (160, 2, 2, 100, 2, 4, 500) if SMALL else (1280, 16, 8, 1000, 8, 16, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"


def alibi_slopes(n):
    start = 2 ** (-(2 ** -(math.log2(n) - 3)))
    return torch.tensor([start * start**i for i in range(n)])


def alibi_mask(n_heads, seq, dev):
    pos = torch.arange(seq, device=dev)
    rel = (pos[None, :] - pos[:, None]).float()  # j - i, <= 0 below the diagonal
    bias = alibi_slopes(n_heads).to(dev)[:, None, None] * rel[None]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=dev).triu(1)
    return bias.masked_fill(causal, float("-inf"))[None]  # (1, H, L, L)


class Block(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p = h, p
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x, bias):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=self.p if self.training else 0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class AlibiGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block(D, H, 0.1) for _ in range(NL))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx, bias):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, bias)
        return self.head(self.ln(x))


model = AlibiGPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
bias = alibi_mask(H, L, device)
if device == "cuda":
    print(f"model+bias {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    idx = torch.randint(0, V, (B, L + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(idx[:, :-1], bias)
        loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    idx = torch.randint(0, V, (EB, L), device=device)
    nll = F.cross_entropy(model(idx, bias)[:, :-1].float().reshape(-1, V), idx[:, 1:].reshape(-1))
if device == "cuda":
    print(f"eval nll {nll.item():.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
