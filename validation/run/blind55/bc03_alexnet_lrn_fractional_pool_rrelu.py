"""AlexNet with the original paper's pieces: `local_response_norm` after the first two
convolutions, `FractionalMaxPool2d` (ratio 0.7) instead of max pooling, RReLU activations
(random slopes in training), dropout in the classifier; batch 128 of 224x224, fp32, SGD with
momentum and weight decay, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5503)
B, HW = (2, 96) if SMALL else (128, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv2d(3, 96, 11, 4, 2),
    nn.RReLU(),
    nn.LocalResponseNorm(5),
    nn.FractionalMaxPool2d(3, output_ratio=0.7),
    nn.Conv2d(96, 256, 5, padding=2),
    nn.RReLU(),
    nn.LocalResponseNorm(5),
    nn.FractionalMaxPool2d(3, output_ratio=0.7),
    nn.Conv2d(256, 384, 3, padding=1),
    nn.RReLU(),
    nn.Conv2d(384, 256, 3, padding=1),
    nn.RReLU(),
    nn.AdaptiveAvgPool2d(6),
    nn.Flatten(),
    nn.Dropout(0.5),
    nn.Linear(256 * 36, 4096),
    nn.RReLU(),
    nn.Dropout(0.5),
    nn.Linear(4096, 1000),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
