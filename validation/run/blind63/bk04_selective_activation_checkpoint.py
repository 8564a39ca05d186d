"""Selective activation checkpointing (torch.utils.checkpoint with use_reentrant=False and a
context_fn from create_selective_checkpoint_contexts): a GPT-style decoder written by hand whose
blocks save only the matmuls' outputs (aten.mm, aten.addmm, SDPA) and recompute the rest; 1,024 wide,
12 layers, batch 8 of 1,024 tokens, bf16 autocast, AdamW, 2 steps; 3 phases."""

import functools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6304)
V, D, H, NL, B, L = (100, 32, 2, 2, 2, 16) if SMALL else (32000, 1024, 16, 12, 8, 1024)
SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        context = functools.partial(create_selective_checkpoint_contexts, policy)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False, context_fn=context)
        return self.head(self.norm(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
