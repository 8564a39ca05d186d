"""Gradient accumulation: 4 micro-batches per optimizer step (loss / accum_steps), AdamW, on a small
convnet + MLP head."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

MICRO, IMG = (2, 32) if os.environ.get("SMOKE") else (64, 128)
ACCUM = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Sequential(
    nn.Conv2d(3, 32, 3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(32, 64, 3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(64, 128, 3, stride=2, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(128, 256),
    nn.ReLU(),
    nn.Linear(256, 10),
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    for micro in range(ACCUM):
        x = torch.randn(MICRO, 3, IMG, IMG, device=device)
        y = torch.randint(0, 10, (MICRO,), device=device)
        loss = F.cross_entropy(model(x), y) / ACCUM
        loss.backward()
        if device == "cuda" and step == 0:
            print(f"micro {micro} peak {torch.cuda.max_memory_allocated()}")
            torch.cuda.reset_peak_memory_stats()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
