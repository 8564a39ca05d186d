"""torchvision ResNet-152 trained with Sharpness-Aware Minimization (SAM, rho 0.05) under bf16
autocast: per step a first forward/backward, the weights moved up the gradient by rho / ||g|| (the
perturbations kept), a second forward/backward at the perturbed weights, the perturbations taken back
and SGD with momentum stepped on the second gradients, batch 24 at 176x176, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import resnet152

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8106)
B, R, C = (2, 64, 10) if SMALL else (24, 176, 1000)
rho = 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"
model = resnet152(num_classes=C).to(device)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    with torch.no_grad():
        grad_norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in params]), p=2)
        scale = rho / (grad_norm + 1e-12)
        perturb = []
        for p in params:
            e_w = p.grad * scale
            p.add_(e_w)
            perturb.append(e_w)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p, e_w in zip(params, perturb, strict=True):
            p.sub_(e_w)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss, grad_norm, scale, perturb, e_w
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
