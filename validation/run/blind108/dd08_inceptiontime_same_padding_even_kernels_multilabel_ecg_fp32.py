"""InceptionTime for 12-lead ECG multi-label classification, hand-written after Fawaz et al.
2020: six Inception modules (a 1x1 bottleneck to 32 channels, three parallel Conv1d of even
kernel sizes 40, 20 and 10 with padding='same', which PyTorch applies as an asymmetric F.pad plus
a symmetric padding, a max-pool + 1x1 branch, BatchNorm1d, ReLU; 128 channels out) with a
shortcut every third module, global average pooling and 27 sigmoid outputs; batch 64 of 10 s
recordings at 500 Hz (5,000 samples), BCE with per-class positive weights, fp32, Adam with
ReduceLROnPlateau, 3 steps; then 256 recordings scored under inference_mode in two halves; 5
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10808)
B, L, STEPS, NEVAL = (4, 300, 2, 8) if SMALL else (64, 5000, 3, 256)
LEADS, NCLS, NF = 12, 27, 32
device = "cuda" if torch.cuda.is_available() else "cpu"


class Inception(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.bottleneck = nn.Conv1d(cin, NF, 1, bias=False) if cin > 1 else nn.Identity()
        b = NF if cin > 1 else cin
        self.convs = nn.ModuleList(nn.Conv1d(b, NF, k, padding="same", bias=False) for k in (40, 20, 10))
        self.pool = nn.MaxPool1d(3, 1, 1)
        self.pool_conv = nn.Conv1d(cin, NF, 1, bias=False)
        self.bn = nn.BatchNorm1d(4 * NF)

    def forward(self, x):
        z = self.bottleneck(x)
        out = [c(z) for c in self.convs] + [self.pool_conv(self.pool(x))]
        return F.relu(self.bn(torch.cat(out, 1)))


class InceptionTime(nn.Module):
    def __init__(self, depth=6):
        super().__init__()
        self.mods = nn.ModuleList(Inception(LEADS if i == 0 else 4 * NF) for i in range(depth))
        self.shortcuts = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(LEADS if i == 0 else 4 * NF, 4 * NF, 1, bias=False), nn.BatchNorm1d(4 * NF)
            )
            for i in range(depth // 3)
        )
        self.fc = nn.Linear(4 * NF, NCLS)

    def forward(self, x):
        res = x
        for i, m in enumerate(self.mods):
            x = m(x)
            if i % 3 == 2:
                x = F.relu(x + self.shortcuts[i // 3](res))
                res = x
        return self.fc(x.mean(-1))


model = InceptionTime().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
pos_weight = torch.linspace(1.0, 8.0, NCLS, device=device)
gen = torch.Generator(device=device).manual_seed(8)


def batch(n):
    x = torch.randn(n, LEADS, L, device=device, generator=gen).cumsum(-1) * 0.05
    y = (torch.rand(n, NCLS, device=device, generator=gen) < 0.1).float()
    return x, y


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x, y = batch(B)
    loss = F.binary_cross_entropy_with_logits(model(x), y, pos_weight=pos_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    plateau.step(loss.item())
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode():
    x, y = batch(NEVAL)
    scores = torch.cat([model(part).sigmoid() for part in x.chunk(2)])
    hits = ((scores > 0.5) == y.bool()).float().mean()
if device == "cuda":
    print(
        f"eval {hits.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
