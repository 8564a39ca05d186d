"""torch.utils.checkpoint (use_reentrant=False) on every block of a deep residual MLP: one training step
without checkpointing, then the same with it, comparing peaks."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

B, D, DEPTH = (8, 32, 3) if os.environ.get("SMOKE") else (8192, 1024, 12)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.head = nn.Linear(D, 10)
        self.use_checkpoint = False

    def forward(self, x):
        for block in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x)


model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(B, D, device=device)
y = torch.randint(0, 10, (B,), device=device)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for use_ckpt in (False, True, True):
    model.use_checkpoint = use_ckpt
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"checkpoint={use_ckpt} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
