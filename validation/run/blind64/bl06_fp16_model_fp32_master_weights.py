"""Mixed precision the old way (apex O2 style) written by hand: the model converted to fp16 by
.half(), an fp32 master copy of every parameter that the optimizer (SGD with momentum) updates, fp16
gradients copied into the masters' .grad with a static loss scale and unscaled there, then the
masters copied back into the fp16 weights; a 24-layer MLP-Mixer-like stack of 1,024-wide Linears on
batch 256 x 196 tokens, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6406)
D, NL, B, T = (32, 2, 4, 8) if SMALL else (1024, 24, 256, 196)
SCALE = 1024.0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = nn.Sequential(*(Block() for _ in range(NL)), nn.Linear(D, 10)).to(device).to(dtype)
params = [p for p in model.parameters()]
masters = [p.detach().float().clone().requires_grad_() for p in params]
optimizer = torch.optim.SGD(masters, lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, T, D, device=device, dtype=dtype)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x).float().mean(1), y)
    (loss * SCALE).backward()
    for p, m in zip(params, masters, strict=True):
        m.grad = p.grad.float().div_(SCALE)
        p.grad = None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        for p, m in zip(params, masters, strict=True):
            p.copy_(m)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
