"""Stochastic weight averaging: a BatchNorm CNN (torchvision resnet34) trained with SGD, a
torch.optim.swa_utils.AveragedModel updated after every step, SWALR, then update_bn over 4 batches of the
averaged copy, fp32, batch 64 at 160x160, 3 steps."""

import os

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torchvision.models import resnet34

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SIZE = (2, 32) if SMALL else (64, 160)
torch.manual_seed(1108)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = resnet34(weights=None, num_classes=100).to(device)
swa_model = AveragedModel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
scheduler = SWALR(optimizer, swa_lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(BATCH, 3, SIZE, SIZE, device=device)
    labels = torch.randint(0, 100, (BATCH,), device=device)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    swa_model.update_parameters(model)
    scheduler.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
loader = [(torch.randn(BATCH, 3, SIZE, SIZE, device=device),) for _ in range(4)]
update_bn(loader, swa_model, device=device)
if device == "cuda":
    print(f"update_bn peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
