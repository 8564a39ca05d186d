"""Quantization-aware training written with PyTorch's fake-quantize ops: every linear layer's
weight through torch.fake_quantize_per_channel_affine (int8 scales from its running max) and its
input through fake_quantize_per_tensor_affine, an MLP of 4096 wide and 6 layers, fp32, AdamW
(foreach), batch 1024, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4206)
D, L, B = (32, 2, 8) if SMALL else (4096, 6, 1024)


class QLinear(nn.Linear):
    def forward(self, x):
        scale = (self.weight.detach().abs().amax(dim=1) / 127).clamp_min(1e-8)
        zero = torch.zeros(self.out_features, dtype=torch.int32, device=x.device)
        w = torch.fake_quantize_per_channel_affine(self.weight, scale, zero, 0, -128, 127)
        x = torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127)
        return F.linear(x, w, self.bias)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(L) for m in (QLinear(D, D), nn.ReLU())], QLinear(D, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
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
