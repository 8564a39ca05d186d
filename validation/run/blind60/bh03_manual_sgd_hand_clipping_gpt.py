"""A GPT-2-small-sized language model written by hand (nn.TransformerEncoderLayer with a causal
mask, pre-norm, GELU), trained without an optimizer object: gradients clipped by hand (the global
norm from torch.stack of per-parameter norms, then p.grad.mul_), momentum buffers kept in a dict and
updated with p.data.add_ under no_grad; batch 16 of 1,024 tokens, fp32, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6003)
V, D, L, NL, B = (100, 32, 16, 2, 2) if SMALL else (50304, 768, 1024, 12, 16)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(L, D)
        layer = nn.TransformerEncoderLayer(
            D, D // 64 if D >= 64 else 2, 4 * D, 0.1, "gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, NL, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        n = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT().to(device)
momentum = {}
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    with torch.no_grad():
        params = [p for p in model.parameters() if p.grad is not None]
        total = torch.stack([p.grad.norm(2) for p in params]).norm(2)
        scale = torch.clamp(1.0 / (total + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(scale)
            buf = momentum.get(p)
            if buf is None:
                buf = momentum[p] = p.grad.clone()
            else:
                buf.mul_(0.9).add_(p.grad)
            p.data.add_(buf, alpha=-0.01)
            p.grad = None
    del ids, logits, loss, params, total, scale
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
