"""A decoder-only transformer written by hand whose attention is torch.nn.attention.flex_attention
called eagerly (no torch.compile) with a BlockMask from create_block_mask: causal within documents
packed into each sequence (a document id per token, a score_mod adding an ALiBi bias); 768 wide,
8 layers, batch 4 of 1,024 tokens, bf16 autocast, AdamW, 2 steps; 3 phases (the CPU smoke
run stops at the first loss: flex_attention has no CPU backward)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6105)
V, D, H, NL, B, L = (100, 32, 2, 2, 2, 128) if SMALL else (32000, 768, 12, 8, 4, 1024)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, block_mask, score_mod):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids, block_mask, score_mod):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, block_mask, score_mod)
        return self.head(self.norm(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Model().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
doc = (torch.arange(L, device=device) // (L // 4)).expand(B, L)
slopes = torch.exp2(-torch.arange(1, H + 1, device=device, dtype=torch.float32) * 8 / H)


def doc_causal(b, h, q, kv):
    return (doc[b, q] == doc[b, kv]) & (q >= kv)


def alibi(score, b, h, q, kv):
    return score - slopes[h] * (q - kv)


block_mask = create_block_mask(doc_causal, B, None, L, L, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16), torch.set_grad_enabled(device == "cuda"):
        logits = model(ids[:, :-1], block_mask, alibi)
    loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    if device == "cpu":  # flex_attention has no CPU backward: the smoke run stops at the loss
        break
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
