"""A plain CNN (6 conv blocks with PReLU, Dropout2d and max-pooling, 64-512 channels, adaptive average
pooling) trained in fp32 for multi-label classification (MultiLabelSoftMarginLoss over 80 labels) on
160x160 images at batch 128, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7205)
B, S = (2, 32) if SMALL else (128, 160)
CH = [3, 64, 128, 128, 256, 256, 512]
layers = []
for i in range(6):
    layers += [nn.Conv2d(CH[i], CH[i + 1], 3, padding=1), nn.PReLU(CH[i + 1]), nn.Dropout2d(0.1)]
    if i % 2 == 1:
        layers.append(nn.MaxPool2d(2))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 80)).to(device)
criterion = nn.MultiLabelSoftMarginLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    targets = (torch.rand(B, 80, device=device) < 0.1).float()
    loss = criterion(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
