"""Custom autograd.Functions that work in place: a scaled in-place GELU-like activation that marks its
input dirty (ctx.mark_dirty) and saves its output, and a top-k gate returning indices marked
non-differentiable (ctx.mark_non_differentiable), in an 8-layer MLP 4,096 wide, fp32, batch 4,096, SGD,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7005)
D, N, B, K = (32, 2, 4, 4) if SMALL else (4096, 8, 4096, 512)


class InplaceSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=-20).exp_().add_(1).log_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - torch.exp(-y))


class TopKGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = x.topk(K, dim=-1)
        out = torch.zeros_like(x).scatter_(-1, idx, values)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return out, idx

    @staticmethod
    def backward(ctx, grad, _):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(grad).scatter_(-1, idx, grad.gather(-1, idx))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(D, D)

    def forward(self, x):
        h, _ = TopKGate.apply(InplaceSoftplus.apply(self.fc(x)))
        return x + h


device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[Layer() for _ in range(N)], nn.Linear(D, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
