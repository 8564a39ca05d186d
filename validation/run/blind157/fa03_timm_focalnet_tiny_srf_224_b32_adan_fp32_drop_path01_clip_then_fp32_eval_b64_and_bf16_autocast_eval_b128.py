"""FocalNet tiny with small receptive field (timm's focalnet_tiny_srf, pretrained=False: focal
modulation with two levels of depthwise convolutions gated and summed, a global context by mean
pooling, a 1 x 1 conv modulator, layer scale off, drop path 0.1) trained in plain fp32 (TF32 left
off, as PyTorch's default for matmul) with create_optimizer_v2(opt="adan", lr=1e-3,
weight_decay=0.02) (timm's Adan with its three betas (0.98, 0.92, 0.99), norms and biases without
decay), gradients clipped to norm 1.0; 224 x 224 at batch 32, 3 steps, each its own phase; then
evaluation in fp32 at batch 64 under no_grad over two batches, and a second evaluation at batch 128
under bf16 autocast over two batches; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15703)
B, RES, EB, EB2, NCLS = (4, 64, 4, 4, 10) if SMALL else (32, 224, 64, 128, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model("focalnet_tiny_srf", pretrained=False, num_classes=NCLS, drop_path_rate=0.1)
model.to(device)
optimizer = create_optimizer_v2(model, opt="adan", lr=1e-3, weight_decay=0.02)
criterion = nn.CrossEntropyLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    inputs = torch.randn(B, 3, RES, RES, device=device)
    labels = torch.randint(0, NCLS, (B,), device=device)
    optimizer.zero_grad()
    outputs = model(inputs)
    loss = criterion(outputs, labels)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del inputs, labels, outputs, loss
model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        inputs = torch.randn(EB, 3, RES, RES, device=device)
        labels = torch.randint(0, NCLS, (EB,), device=device)
        correct += (model(inputs).argmax(1) == labels).sum().item()
if device == "cuda":
    print(
        f"eval fp32 acc {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del inputs, labels
correct = 0
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        inputs = torch.randn(EB2, 3, RES, RES, device=device)
        labels = torch.randint(0, NCLS, (EB2,), device=device)
        correct += (model(inputs).argmax(1) == labels).sum().item()
if device == "cuda":
    print(
        f"eval bf16 acc {correct / (2 * EB2):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
