"""Kolmogorov-Arnold network (Liu et al. 2024) in the style of efficient-kan, on random flattened 3 x 32 x 32 inputs.

Each KANLinear layer has a SiLU base branch (F.linear of silu(x)) and a spline branch: the B-spline basis of
order 3 on a uniform grid of 8 intervals (extended by 3 knots on each side) is evaluated by Cox-de Boor
recursion by hand on [B, in, knots] tensors, and contracted with per-edge spline coefficients (scaled by a
per-edge spline scaler) through torch.einsum("bik,oik->bo"). A LayerNorm sits between KAN layers.

Phases: 3 steps of a 3072 -> 256 -> 256 -> 10 KAN at batch 4096, fp32, Adam; evaluation under no_grad at
batch 8192; 3 steps under bf16 autocast with fused AdamW (the recursion stays fp32, the einsum runs in bf16);
then empty_cache() and a wider KAN (3072 -> 512 -> 512 -> 512 -> 10, grid of 12 intervals) with every
layer under non-reentrant torch.utils.checkpoint, foreach Adam, and efficient-kan's L1 + entropy
regularisation of the spline coefficients added to the loss, at batch 8192. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2211)
device = "cuda" if torch.cuda.is_available() else "cpu"
IN, CLASSES = 3072, 10
BATCH, EVAL_BATCH, CKPT_BATCH = (32, 64, 16) if SMALL else (4096, 8192, 8192)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class KANLinear(nn.Module):
    def __init__(self, in_features, out_features, grid_size=8, spline_order=3, grid_range=(-1.0, 1.0)):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.grid_size, self.spline_order = grid_size, spline_order
        h = (grid_range[1] - grid_range[0]) / grid_size
        grid = torch.arange(-spline_order, grid_size + spline_order + 1) * h + grid_range[0]
        self.register_buffer("grid", grid.expand(in_features, -1).contiguous())
        self.base_weight = nn.Parameter(torch.empty(out_features, in_features))
        self.spline_weight = nn.Parameter(torch.empty(out_features, in_features, grid_size + spline_order))
        self.spline_scaler = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.kaiming_uniform_(self.base_weight, a=5**0.5)
        nn.init.normal_(self.spline_weight, std=0.1 / grid_size)
        nn.init.kaiming_uniform_(self.spline_scaler, a=5**0.5)

    def b_splines(self, x):
        """Cox-de Boor recursion: x [B, in] -> bases [B, in, grid_size + spline_order]."""
        grid = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.spline_order + 1):
            left = (x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)]) * bases[:, :, :-1]
            right = (grid[:, k + 1 :] - x) / (grid[:, k + 1 :] - grid[:, 1:(-k)]) * bases[:, :, 1:]
            bases = left + right
        return bases.contiguous()

    @property
    def scaled_spline_weight(self):
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)

    def forward(self, x):
        base = F.linear(F.silu(x), self.base_weight)
        spline = torch.einsum("bik,oik->bo", self.b_splines(x), self.scaled_spline_weight)
        return base + spline

    def regularization_loss(self, act=1.0, entropy=1.0):
        l1 = self.spline_weight.abs().mean(-1)
        total = l1.sum()
        p = l1 / total
        return act * total + entropy * -torch.sum(p * p.log())


class KAN(nn.Module):
    def __init__(self, widths, grid_size=8, ckpt=False):
        super().__init__()
        self.layers = nn.ModuleList(KANLinear(a, b, grid_size) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(w) for w in widths[1:-1])
        self.ckpt = ckpt

    def forward(self, x):
        x = torch.tanh(x)  # into the grid range
        for i, layer in enumerate(self.layers):
            x = checkpoint(layer, x, use_reentrant=False) if self.ckpt else layer(x)
            if i < len(self.norms):
                x = torch.tanh(self.norms[i](x))
        return x

    def regularization_loss(self):
        return sum(layer.regularization_loss() for layer in self.layers)


model = KAN([IN, 256, 256, CLASSES]).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(BATCH, IN, device=device)
    y = torch.randint(0, CLASSES, (BATCH,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"fp32 loss {loss.item():.4f}")
report("kan fp32 adam")

model.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, IN, device=device)
    y = torch.randint(0, CLASSES, (EVAL_BATCH,), device=device)
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"eval acc {acc:.4f}")
report("kan no_grad eval")

model.train()
del opt
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, fused=device == "cuda")
for step in range(3):
    x = torch.randn(BATCH, IN, device=device)
    y = torch.randint(0, CLASSES, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"bf16 loss {loss.item():.4f}")
report("kan bf16 autocast fused adamw")

del model, opt, loss
if device == "cuda":
    torch.cuda.empty_cache()
model = KAN([IN, 512, 512, 512, CLASSES], grid_size=12, ckpt=True).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
for step in range(3):
    x = torch.randn(CKPT_BATCH, IN, device=device)
    y = torch.randint(0, CLASSES, (CKPT_BATCH,), device=device)
    loss = F.cross_entropy(model(x), y) + 1e-4 * model.regularization_loss()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"checkpointed wide kan loss {loss.item():.4f}")
report("wide kan checkpointed foreach adam")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
