"""Magnitude pruning with torch.nn.utils.prune as its tutorial writes it, on torchvision's ResNet-50
(1,000 classes, made channels-last after pruning): l1_unstructured on the classifier (50%),
ln_structured (L2, 30% of the output channels, dim 0) on every convolution of layer4, then
global_unstructured with L1Unstructured over every convolution of layer1..layer3 and the stem (60%
of them together), so each pruned module keeps weight_orig, a weight_mask buffer and a forward
pre-hook that multiplies them; then a fine-tune of 3 steps at batch 128 x 224 x 224 under bf16 autocast
with SGD (momentum 0.9, nesterov, weight decay 1e-4), the optimizer built over the pruned model;
then prune.remove on every pruned module (the masked weight made the parameter) and an evaluation of
2 batches of 256 under inference_mode and bf16 autocast; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15103)
B, RES, EB, NCLS, STEPS = (4, 64, 4, 10, 1) if SMALL else (128, 224, 256, 1000, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

model = torchvision.models.resnet50(num_classes=NCLS).to(device)
criterion = nn.CrossEntropyLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

prune.l1_unstructured(model.fc, name="weight", amount=0.5)
for m in model.layer4.modules():
    if isinstance(m, nn.Conv2d):
        prune.ln_structured(m, name="weight", amount=0.3, n=2, dim=0)
early = [model.conv1] + [
    m
    for layer in (model.layer1, model.layer2, model.layer3)
    for m in layer.modules()
    if isinstance(m, nn.Conv2d)
]
prune.global_unstructured([(m, "weight") for m in early], pruning_method=prune.L1Unstructured, amount=0.6)
pruned = [m for m in model.modules() if prune.is_pruned(m) and hasattr(m, "weight_mask")]
model.to(memory_format=CL)  # after pruning: parameters_to_vector and the masks view weights flat
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"pruned {len(pruned)} modules peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=CL)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = criterion(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del x, y, loss

for m in pruned:
    prune.remove(m, "weight")
del opt
zeros = sum(int((m.weight == 0).sum()) for m in pruned)
total = sum(m.weight.numel() for m in pruned)
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += int((model(x).argmax(1) == y).sum())
if device == "cuda":
    print(
        f"sparsity {zeros / total:.3f} correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
