"""A capsule network with dynamic routing (Sabour et al.) written by hand: a 9x9 convolution, primary
capsules (32 x 6 x 6 of 8 dimensions), prediction vectors for 10 digit capsules of 16 dimensions by
one batched matmul, 3 routing iterations (softmax over the digit capsules, weighted sums, squash,
agreement), the margin loss and a masked reconstruction decoder; batch 128 of 1x28x28, fp32, Adam,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5006)
B = 4 if SMALL else 128
device = "cuda" if torch.cuda.is_available() else "cpu"


def squash(s, dim=-1):
    n2 = s.pow(2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / (n2.sqrt() + 1e-8)


class CapsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 256, 9)
        self.primary = nn.Conv2d(256, 32 * 8, 9, stride=2)
        self.W = nn.Parameter(torch.randn(1, 1152, 10, 16, 8) * 0.01)
        self.decoder = nn.Sequential(
            nn.Linear(160, 512),
            nn.ReLU(),
            nn.Linear(512, 1024),
            nn.ReLU(),
            nn.Linear(1024, 784),
            nn.Sigmoid(),
        )

    def forward(self, x, y):
        h = F.relu(self.conv(x))
        u = self.primary(h).view(x.shape[0], 32, 8, 6, 6).permute(0, 1, 3, 4, 2).reshape(x.shape[0], 1152, 8)
        u = squash(u)
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)
        logits = torch.zeros(x.shape[0], 1152, 10, device=x.device)
        for i in range(3):
            c = logits.softmax(-1)
            v = squash((c[..., None] * u_hat).sum(1))
            if i < 2:
                logits = logits + (u_hat * v[:, None]).sum(-1)
        lengths = v.norm(dim=-1)
        onehot = F.one_hot(y, 10).float()
        margin = onehot * F.relu(0.9 - lengths).pow(2) + 0.5 * (1 - onehot) * F.relu(lengths - 0.1).pow(2)
        recon = self.decoder((v * onehot[..., None]).flatten(1))
        return margin.sum(-1).mean() + 0.0005 * F.mse_loss(recon, x.flatten(1), reduction="sum") / x.shape[0]


model = CapsNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
