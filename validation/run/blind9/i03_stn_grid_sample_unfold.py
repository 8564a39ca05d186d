"""A spatial-transformer classifier: a localisation CNN predicts affine parameters, `F.affine_grid` and
`F.grid_sample` (bilinear, zeros padding) warp 128 x 128 images, then a patch encoder built from
`F.unfold` (8 x 8 patches, stride 8) and a linear embedding, mean-pooled into a 100-way head;
`F.fold` reconstructs the image for an auxiliary L1 loss. fp32, SGD with momentum, batch 96, 3 steps."""

import os

import torch
from torch import nn
from torch.nn import functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, RES = (2, 32) if SMALL else (96, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(903)


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(
            nn.Conv2d(3, 32, 5, stride=2, padding=2), nn.ReLU(), nn.Conv2d(32, 64, 5, stride=2, padding=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(1024, 6),
        )
        self.embed = nn.Linear(3 * 64, 384)
        self.decode = nn.Linear(384, 3 * 64)
        self.head = nn.Linear(384, 100)

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        warped = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        patches = F.unfold(warped, kernel_size=8, stride=8).transpose(1, 2)
        tokens = F.gelu(self.embed(patches))
        recon = F.fold(self.decode(tokens).transpose(1, 2), output_size=x.shape[-2:], kernel_size=8, stride=8)
        return self.head(tokens.mean(1)), F.l1_loss(recon, warped.detach())


model = STN().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    y = torch.randint(0, 100, (BATCH,), device=device)
    logits, aux = model(x)
    loss = F.cross_entropy(logits, y) + 0.1 * aux
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
