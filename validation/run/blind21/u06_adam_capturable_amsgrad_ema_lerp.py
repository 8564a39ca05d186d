"""A ResNet-style CNN (BatchNorm, 64-256 channels) in fp32 trained with Adam(capturable=True,
amsgrad=True) (foreach default: its step counts live on the GPU), a CosineAnnealingLR schedule, and an
EMA copy of the parameters updated with torch._foreach_lerp_; batch 64 of 3 x 128 x 128, 3 steps,
then the EMA model evaluated under no_grad; 5 phases."""

import copy
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2106)
B, R, C = (2, 32, 8) if SMALL else (64, 128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, stride):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


model = nn.Sequential(
    block(3, C, 2),
    block(C, 2 * C, 2),
    block(2 * C, 4 * C, 2),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(4 * C, 100),
).to(device)
ema = copy.deepcopy(model).eval()
for p in ema.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=device == "cuda", amsgrad=True)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.01)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    logits = ema(torch.randn(2 * B, 3, R, R, device=device))
if device == "cuda":
    print(f"ema eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
