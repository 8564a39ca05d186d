"""Newer PyTorch memory idioms around a small transformer: `torch.set_default_device` / `with
torch.device("cuda")` model construction, `torch.cuda.MemPool` with `use_mem_pool` for a side buffer,
selective activation checkpointing (`create_selective_checkpoint_contexts` with a policy that saves
matmuls and recomputes the rest), `FlopCounterMode` around one step, bf16 autocast, fused AdamW.

An 8-layer pre-norm transformer (d 768, 12 heads through SDPA, causal, MLP 3072) on token embeddings of
a 32k vocabulary. Phases: construction under `with torch.device("cuda")` and a 256 MiB buffer made inside
a MemPool and kept; 3 training steps at batch 16 x 1024 with every block checkpointed under the SAC
policy (bf16 autocast, fused AdamW); one step counted by FlopCounterMode (no checkpointing); the pool's
buffer freed and the pool dropped, then `torch.set_default_device("cuda")` for eval under no_grad at batch
32. No value-dependent sizes. 4 phases."""

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from torch.utils.flop_counter import FlopCounterMode

torch.manual_seed(2332)
V, D, H, L, T = 32000, 768, 12, 8, 1024


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, sac=False):
        x = self.emb(idx)
        for blk in self.blocks:
            if sac:
                x = checkpoint(
                    blk,
                    x,
                    use_reentrant=False,
                    context_fn=partial(create_selective_checkpoint_contexts, policy),
                )
            else:
                x = blk(x)
        return self.head(self.norm(x))


def policy(ctx, op, *args, **kwargs):
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


with torch.device("cuda"):
    model = LM()
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    side = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
print("params", sum(p.numel() for p in model.parameters()), "pool segments", len(pool.snapshot()))
report("build under device context and mem pool")

opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
for step in range(3):
    idx = torch.randint(0, V, (16, T), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx, sac=True)
        loss = F.cross_entropy(logits.view(-1, V).float(), idx.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("sac step", step, loss.item())
del logits, loss
report("train sac bf16")

with FlopCounterMode(display=False) as counter:
    idx = torch.randint(0, V, (16, T), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(idx).view(-1, V).float(), idx.view(-1))
    loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
print("flops", counter.get_total_flops())
del loss
report("flop counted step")

del side
del pool
torch.set_default_device("cuda")
model.eval()
with torch.no_grad():
    logits = model(torch.randint(0, V, (32, T)))
    print("eval", tuple(logits.shape))
torch.set_default_device(None)
del logits
report("eval default device")
