"""Gradient-norm regularisation (penalising the squared norm of the parameter gradient, as in
"Penalizing Gradient Norm for Efficiently Improving Generalization"): a CIFAR-style VGG with
BatchNorm, ReLU and max pooling in fp32; each step takes torch.autograd.grad of the cross-entropy
with create_graph=True, adds 0.05 x the sum of squared gradients to the loss and back-propagates
through the gradient graph (double backward of convolutions, batch norm and pooling); SGD with
Nesterov momentum and weight decay, batch 128 of 32 x 32, 3 steps, then an eval batch of 1,024
under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9603)
B, BE, WIDTHS = (8, 16, (8, 16, 32)) if SMALL else (128, 1024, (64, 128, 256, 512))
device = "cuda" if torch.cuda.is_available() else "cpu"


def vgg():
    layers, c = [], 3
    for w in WIDTHS:
        for _ in range(2):
            layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
            c = w
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


model = vgg().to(device)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    total = loss + 0.05 * penalty
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} penalty {penalty.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss, grads, penalty, total
model.eval()
with torch.no_grad():
    logits = model(torch.randn(BE, 3, 32, 32, device=device))
    pred = logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
