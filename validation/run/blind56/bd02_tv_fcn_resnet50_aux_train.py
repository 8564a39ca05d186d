"""torchvision's FCN-ResNet50 (aux classifier on) trained from scratch for 21-class segmentation:
batch 8 of 480x480, the main and auxiliary cross-entropy losses (0.5 weight), fp32, SGD with
momentum and weight decay, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5602)
B, HW = (1, 64) if SMALL else (8, 480)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.segmentation.fcn_resnet50(num_classes=21, aux_loss=True, weights_backbone=None)
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    target = torch.randint(0, 21, (B, HW, HW), device=device)
    out = model(x)
    loss = F.cross_entropy(out["out"], target) + 0.5 * F.cross_entropy(out["aux"], target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, target, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
