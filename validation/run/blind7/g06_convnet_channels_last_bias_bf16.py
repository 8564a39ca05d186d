"""A VGG-style convolutional net with biases (no normalization), `channels_last` memory format, bf16
autocast, SGD with momentum, batch 128 at 160 px, 3 steps; then `no_grad` eval at batch 256."""

import os

import torch
from torch import nn

B, PX = (4, 32) if os.environ.get("SMOKE") else (128, 160)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(706)
layers, c = [], 3
for width, n in ((64, 2), (128, 2), (256, 3), (512, 3)):
    for _ in range(n):
        layers += [nn.Conv2d(c, width, 3, padding=1, bias=True), nn.ReLU(inplace=True)]
        c = width
    layers.append(nn.MaxPool2d(2))
model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))
model = model.to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, PX, PX, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    out = model(torch.randn(2 * B, 3, PX, PX, device=device).to(memory_format=torch.channels_last))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
