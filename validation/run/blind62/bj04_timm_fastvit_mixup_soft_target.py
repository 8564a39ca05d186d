"""timm's FastViT-SA12 (fastvit_sa12: reparameterisable MobileOne blocks, RepMixer, attention in
the last stage) trained with timm's Mixup/CutMix (label smoothing 0.1, soft targets) and
SoftTargetCrossEntropy on 256x256 images at batch 48, fp32, SGD with Nesterov momentum, 2 steps;
then reparameterised (timm.utils.reparameterize_model) and run in eval at batch 48; 4 phases."""

import os

import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils import reparameterize_model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6204)
B, S = (4, 64) if SMALL else (48, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("fastvit_sa12", num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=1000)
criterion = SoftTargetCrossEntropy()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    images, soft = mixup(images, targets)
    loss = criterion(model(images), soft)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, soft, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model = reparameterize_model(model.eval())
with torch.no_grad():
    logits = model(torch.randn(B, 3, S, S, device=device))
del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
