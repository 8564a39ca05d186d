"""An MLP-Mixer written by hand (token-mixing and channel-mixing MLPs over 16x16 patches) in fp32,
RAdam with decoupled weight decay, an exponential moving average of the weights kept by
torch.optim.swa_utils.AveragedModel (get_ema_multi_avg_fn), batch 128 at 224x224, 2 steps, then
the EMA model evaluated under no_grad; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4303)
B, D, DEPTH = (4, 32, 2) if SMALL else (128, 512, 8)
N = (224 // 16) ** 2


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.token = nn.Sequential(nn.Linear(N, 256), nn.GELU(), nn.Linear(256, N))
        self.norm2 = nn.LayerNorm(D)
        self.channel = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.token(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, D, 16, stride=16)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, 1000)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Mixer().to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
optimizer = torch.optim.RAdam(model.parameters(), lr=1e-3, weight_decay=0.05, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    logits = ema(torch.randn(B, 3, 224, 224, device=device))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
