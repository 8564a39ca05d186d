"""Quantization-aware training the way torchvision's references/classification/train_quantization.py
does it: torchvision's quantizable ResNet-50 (no weights) moved to the GPU, `fuse_model(is_qat=True)`
(Conv+BN+ReLU into ConvBnReLU2d), the x86 default QAT qconfig (fused moving-average observer and
fake quantize for activations, per-channel symmetric for weights) and `prepare_qat`; SGD with
momentum and weight decay in fp32 on 64 x 224 x 224 batches with label smoothing, observers
disabled after the second step and BatchNorm statistics frozen after the third, then an
evaluation of 256 images under no_grad; 6 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12405)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, S, EVAL_B = (4, 64, 8) if SMALL else (64, 224, 256)

model = torchvision.models.quantization.resnet50(weights=None, quantize=False)
model.to(device)
model.fuse_model(is_qat=True)
model.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
torch.ao.quantization.prepare_qat(model, inplace=True)
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=1e-4)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"qat model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    if step == 2:
        model.apply(torch.ao.quantization.disable_observer)
    if step == 3:
        model.apply(torch.ao.nn.intrinsic.qat.freeze_bn_stats)
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = crit(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(EVAL_B, 3, S, S, device=device)
        y = torch.randint(0, 1000, (EVAL_B,), device=device)
        correct += (model(x).argmax(1) == y).sum()
if device == "cuda":
    print(
        f"eval acc {correct.item() / (2 * EVAL_B):.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
