"""Adversarial training with a 5-step PGD attack: each step's perturbation from
`torch.autograd.grad(loss, delta)` through torchvision's resnet18 (the weights' gradients not
asked for), then a training step on the attacked batch; fp32, SGD momentum, batch 128 of 3x64x64,
2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5001)
B, IMG, ITERS = (2, 32, 2) if SMALL else (128, 64, 5)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnet18(num_classes=200).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 200, (B,), device=device)
    delta = torch.empty_like(x).uniform_(-8 / 255, 8 / 255).requires_grad_(True)
    model.eval()
    for _ in range(ITERS):
        loss = F.cross_entropy(model((x + delta).clamp(0, 1)), y)
        (grad,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + 2 / 255 * grad.sign()).clamp(-8 / 255, 8 / 255).requires_grad_(True)
        del loss, grad
    model.train()
    loss = F.cross_entropy(model((x + delta.detach()).clamp(0, 1)), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, delta, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
