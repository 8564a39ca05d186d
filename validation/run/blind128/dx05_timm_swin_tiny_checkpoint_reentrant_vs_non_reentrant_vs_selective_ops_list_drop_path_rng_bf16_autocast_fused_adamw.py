"""A timm Swin-T (window 7, drop_path 0.2, 1,000 classes) trained at batch 64 x 224 x 224 under bf16
autocast with fused AdamW, its 12 blocks each wrapped to be run four ways in turn, one training step
each: as they are, under torch.utils.checkpoint with use_reentrant=True (the RNG state of drop_path
preserved), with use_reentrant=False, and with use_reentrant=False and a selective-checkpoint
context_fn built from a list of ops to save (create_selective_checkpoint_contexts([mm, addmm])); then
an evaluation under no_grad; 6 phases."""

import functools
import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12805)
B, IMG = (2, 224) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
aten = torch.ops.aten
SELECTIVE = functools.partial(create_selective_checkpoint_contexts, [aten.mm.default, aten.addmm.default])
MODE = {"now": "plain"}


class Wrapped(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        mode = MODE["now"]
        if mode == "plain" or not torch.is_grad_enabled():
            return self.block(x)
        if mode == "reentrant":
            return checkpoint(self.block, x, use_reentrant=True)
        if mode == "non-reentrant":
            return checkpoint(self.block, x, use_reentrant=False)
        return checkpoint(self.block, x, use_reentrant=False, context_fn=SELECTIVE)


model = timm.create_model(
    "swin_tiny_patch4_window7_224",
    num_classes=1000,
    drop_path_rate=0.2,
)
for stage in model.layers:
    stage.blocks = nn.Sequential(*[Wrapped(b) for b in stage.blocks])
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")


def step():
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for mode in ("plain", "reentrant", "non-reentrant", "selective"):
    MODE["now"] = mode
    loss = step()
    if device == "cuda":
        print(
            f"{mode} loss {loss:.3f} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(2 * B, 3, IMG, IMG, device=device)
    pred = model(x).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke eval {tuple(pred.shape)}")
