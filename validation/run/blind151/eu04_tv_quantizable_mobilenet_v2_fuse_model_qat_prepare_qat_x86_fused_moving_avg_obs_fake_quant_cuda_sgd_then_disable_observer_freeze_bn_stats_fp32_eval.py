"""Quantization-aware training on CUDA as the torchvision reference's train_quantization.py does it:
torchvision's quantizable MobileNetV2 (quantize=False, 1,000 classes) with fuse_model(is_qat=True)
(ConvBnReLU2d / ConvBn2d QAT modules), the "x86" default QAT qconfig (FusedMovingAvgObsFakeQuantize
on activations, per-channel symmetric on weights), torch.ao.quantization.prepare_qat in place, then
moved to the GPU; fp32, SGD (momentum 0.9, weight decay 4e-5), batch 192 at 224 x 224; 2 steps with
the observers on, then observers disabled (disable_observer) and batch-norm statistics frozen
(freeze_bn_stats), 2 more steps; then an evaluation of 2 batches of 256 under no_grad with the fake
quantization still on; 6 phases."""

import os

import torch
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.quantization as tq
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15104)
B, RES, EB, NCLS, STEPS = (4, 64, 4, 10, 1) if SMALL else (192, 224, 256, 1000, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.quantization.mobilenet_v2(weights=None, quantize=False, num_classes=NCLS)
model.fuse_model(is_qat=True)
model.qconfig = tq.get_default_qat_qconfig("x86")
tq.prepare_qat(model, inplace=True)
model.to(device)
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=4e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(tag):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    loss = criterion(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
for i in range(STEPS):
    train_step(f"observe {i}")
model.apply(tq.disable_observer)
model.apply(nniqat.freeze_bn_stats)
for i in range(STEPS):
    train_step(f"frozen {i}")

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += int((model(x).argmax(1) == y).sum())
if device == "cuda":
    print(
        f"eval correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
