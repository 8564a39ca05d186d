"""Selective activation checkpointing as torchtitan applies it: a hand-written GPT (1024 wide,
8 layers, 16 heads, learned positions) in bf16 whose blocks run under
torch.utils.checkpoint(use_reentrant=False, context_fn=create_selective_checkpoint_contexts(policy)),
the policy saving the matmuls' and the flash attention's outputs and recomputing everything else;
batch 8 at 1024 tokens, AdamW (foreach), 2 steps; 3 phases."""

import functools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3404)
D, L, H, V, B, S = (32, 2, 4, 64, 2, 16) if SMALL else (1024, 8, 16, 32000, 8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
aten = torch.ops.aten
SAVE = {aten.mm.default, aten.addmm.default, aten._scaled_dot_product_flash_attention.default}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


model = nn.ModuleDict(
    {
        "tok": nn.Embedding(V, D),
        "pos": nn.Embedding(S, D),
        "blocks": nn.ModuleList(Block() for _ in range(L)),
        "ln": nn.LayerNorm(D),
    }
).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
context = functools.partial(create_selective_checkpoint_contexts, policy)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    x = model["tok"](ids[:, :-1]) + model["pos"](torch.arange(S, device=device))
    for blk in model["blocks"]:
        x = checkpoint(blk, x, use_reentrant=False, context_fn=context)
    logits = F.linear(model["ln"](x), model["tok"].weight)
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, x, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
