"""A custom autograd Function decorated with torch.amp.custom_fwd(device_type="cuda",
cast_inputs=torch.float16) and custom_bwd: a fused SwiGLU feed-forward that saves its fp16 inputs and
both projections, run under fp16 autocast inside an fp32 model (LayerNorm, residuals), with
torch.amp.GradScaler and Adam; batch 32 x 512 tokens, width 1024, 4 blocks, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1903)
B, T, W, DEPTH = (2, 8, 32, 2) if SMALL else (32, 512, 1024, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class SwiGLU(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16)
    def forward(ctx, x, w1, w3, w2):
        a = x @ w1.t()
        b = x @ w3.t()
        h = F.silu(a) * b
        ctx.save_for_backward(x, w1, w3, w2, a, b)
        return h @ w2.t()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        x, w1, w3, w2, a, b = ctx.saved_tensors
        sa = torch.sigmoid(a)
        silu = a * sa
        h = silu * b
        gw2 = g.flatten(0, -2).t() @ h.flatten(0, -2)
        gh = g @ w2
        gb = gh * silu
        ga = gh * b * (sa * (1 + a * (1 - sa)))
        gx = ga @ w1 + gb @ w3
        gw1 = ga.flatten(0, -2).t() @ x.flatten(0, -2)
        gw3 = gb.flatten(0, -2).t() @ x.flatten(0, -2)
        return gx, gw1, gw3, gw2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(W)
        self.w1 = nn.Parameter(torch.randn(4 * W, W) * 0.02)
        self.w3 = nn.Parameter(torch.randn(4 * W, W) * 0.02)
        self.w2 = nn.Parameter(torch.randn(W, 4 * W) * 0.02)

    def forward(self, x):
        return x + SwiGLU.apply(self.norm(x), self.w1, self.w3, self.w2)


model = nn.Sequential(*[Block() for _ in range(DEPTH)], nn.Linear(W, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, T, W, device=device)
    y = torch.randn(B, T, 1, device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
