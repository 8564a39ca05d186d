"""A spatial transformer network (Jaderberg et al.) as the PyTorch tutorial builds it, scaled up:
a localisation CNN regresses a 2x3 affine matrix per image, F.affine_grid and F.grid_sample
(bilinear, zero padding) warp the 3x128x128 input, a classifier CNN follows; fp32, batch 128,
SGD with momentum 0.9, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3403)
B, R, C = (2, 32, 8) if SMALL else (128, 128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(
            nn.Conv2d(3, C, 7),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Conv2d(C, C, 5),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(C * 16, 32),
            nn.ReLU(),
            nn.Linear(32, 6),
        )
        self.loc[-1].weight.data.zero_()
        self.loc[-1].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
        self.features = nn.Sequential(
            nn.Conv2d(3, C, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(C, 2 * C, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * C, 4 * C, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(4 * C, 100)

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return self.fc(self.features(x))


model = STN().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
