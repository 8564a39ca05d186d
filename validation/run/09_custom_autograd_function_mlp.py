"""A custom torch.autograd.Function (fused Linear+GELU that saves its input, weight and pre-activation)
inside a small MLP, trained with Adam."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, D, H, LAYERS = (8, 32, 64, 2) if os.environ.get("SMOKE") else (4096, 1024, 4096, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class LinearGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        h = torch.addmm(bias, x, weight.t())
        ctx.save_for_backward(x, weight, h)
        return F.gelu(h)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, h = ctx.saved_tensors
        cdf = 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi)
        grad_h = grad_out * (cdf + h * pdf)
        grad_x = grad_h @ weight
        grad_w = grad_h.t() @ x
        grad_b = grad_h.sum(0)
        return grad_x, grad_w, grad_b


class FusedLinearGELU(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x):
        return LinearGELU.apply(x, self.weight, self.bias)


layers = [FusedLinearGELU(D, H)]
for _ in range(LAYERS - 1):
    layers.append(FusedLinearGELU(H, H))
model = nn.Sequential(*layers, nn.Linear(H, 10)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
print("loss", loss.item())
