"""Quantization-aware training in eager mode (torch.ao.quantization): a ResNet-style CNN written by
hand with QuantStub/DeQuantStub, conv+bn+relu fused by fuse_modules_qat, prepared by prepare_qat with
the x86 default QAT qconfig (per-channel fused moving-average observers and fake quantization on
weights and activations), trained on 128x128 images at batch 64, fp32, SGD, 3 steps; 4 phases."""

import itertools
import os

import torch
import torch.ao.quantization as tq
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6206)
B, S, W = (4, 32, 8) if SMALL else (64, 128, 64)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv, self.bn, self.relu = (
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        chans = [3, W, W, 2 * W, 2 * W, 4 * W, 4 * W, 8 * W]
        self.blocks = nn.Sequential(
            *(Block(a, b, 2 if i % 2 == 0 else 1) for i, (a, b) in enumerate(itertools.pairwise(chans)))
        )
        self.fc = nn.Linear(8 * W, 100)

    def forward(self, x):
        x = self.blocks(self.quant(x))
        return self.fc(self.dequant(F.adaptive_avg_pool2d(x, 1).flatten(1)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Net().train()
for blk in model.blocks:
    tq.fuse_modules_qat(blk, [["conv", "bn", "relu"]], inplace=True)
model.qconfig = tq.get_default_qat_qconfig("x86")
model = tq.prepare_qat(model).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(B, 3, S, S, device=device)
    targets = torch.randint(0, 100, (B,), device=device)
    loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
