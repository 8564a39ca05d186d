"""A ViT-B/16, hand-written (12 blocks, d 768, SDPA), trained under bf16 autocast at batch 128 of
224x224 images: its first 4 blocks' saved activations offloaded to pinned host memory with
torch.autograd.graph.save_on_cpu, the other 8 blocks under torch.utils.checkpoint (use_reentrant=False)
with a selective policy from create_selective_checkpoint_contexts (matmuls and attention saved,
everything else recomputed); torch.optim.Adafactor (foreach), timm's ModelEmaV3 (warm-up, foreach)
updated each step; 3 steps; then the EMA copy evaluated under inference_mode and bf16 autocast;
5 phases."""

import os
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.utils import ModelEmaV3
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11206)
B, S, P, D, L, NH, OFFLOAD, STEPS = (
    (2, 64, 16, 64, 4, 4, 2, 1) if SMALL else (128, 224, 16, 768, 12, 12, 4, 3)
)
NCLS = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
aten = torch.ops.aten
SAVE = {
    aten.mm.default,
    aten.addmm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-6), nn.LayerNorm(D, eps=1e-6)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (S // P) ** 2 + 1, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D, eps=1e-6)
        self.head = nn.Linear(D, NCLS)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for i, blk in enumerate(self.blocks):
            if not self.training:
                x = blk(x)
            elif i < OFFLOAD:
                with torch.autograd.graph.save_on_cpu(pin_memory=amp):
                    x = blk(x)
            else:
                ctx = partial(create_selective_checkpoint_contexts, policy)
                x = checkpoint(blk, x, use_reentrant=False, context_fn=ctx)
        return self.head(self.norm(x[:, 0]))


model = ViT().to(device)
opt = torch.optim.Adafactor(model.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True)
ema = ModelEmaV3(model, decay=0.9998, use_warmup=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update(model, step=step)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
ema.module.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x = torch.randn(2 * B, 3, S, S, device=device)
    top = ema.module(x).topk(5).indices
if device == "cuda":
    print(
        f"eval {tuple(top.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
