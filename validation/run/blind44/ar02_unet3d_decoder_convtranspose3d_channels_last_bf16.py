"""A 3-D encoder-decoder for volumes: strided Conv3d down, ConvTranspose3d up with skip
concatenations, BatchNorm3d and ReLU, the model and inputs in channels_last_3d, bf16 autocast,
Adam, Dice plus cross-entropy loss on 4 classes, batch 2 volumes of 96^3, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4402)
B, V, W = (1, 16, 4) if SMALL else (2, 96, 24)


def block(cin, cout):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU(inplace=True)
    )


class UNet3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1, self.e2, self.e3 = block(1, W), block(W, 2 * W), block(2 * W, 4 * W)
        self.d1, self.d2 = nn.Conv3d(W, W, 2, stride=2), nn.Conv3d(2 * W, 2 * W, 2, stride=2)
        self.u2 = nn.ConvTranspose3d(4 * W, 2 * W, 2, stride=2)
        self.c2 = block(4 * W, 2 * W)
        self.u1 = nn.ConvTranspose3d(2 * W, W, 2, stride=2)
        self.c1 = block(2 * W, W)
        self.out = nn.Conv3d(W, 4, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(self.d1(a))
        c = self.e3(self.d2(b))
        b = self.c2(torch.cat([self.u2(c), b], dim=1))
        return self.out(self.c1(torch.cat([self.u1(b), a], dim=1)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = UNet3D().to(device).to(memory_format=torch.channels_last_3d)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 1, V, V, V, device=device).to(memory_format=torch.channels_last_3d)
    y = torch.randint(0, 4, (B, V, V, V), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
    probs = logits.float().softmax(1)
    onehot = F.one_hot(y, 4).permute(0, 4, 1, 2, 3).float()
    dice = 1 - (2 * (probs * onehot).sum((2, 3, 4)) + 1) / (probs.sum((2, 3, 4)) + onehot.sum((2, 3, 4)) + 1)
    loss = F.cross_entropy(logits.float(), y) + dice.mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, logits, probs, onehot, dice, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
