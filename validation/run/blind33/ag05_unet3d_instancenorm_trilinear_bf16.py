"""A 3-D U-Net for volumetric segmentation (nnU-Net style: Conv3d + InstanceNorm3d + LeakyReLU
pairs, strided-convolution downsampling, trilinear upsampling and skip concatenation, 4 classes)
under bf16 autocast, 96^3 patches, batch 2, Dice + cross-entropy loss, SGD with Nesterov
momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3305)
B, R, W = (1, 16, 4) if SMALL else (2, 96, 24)
device = "cuda" if torch.cuda.is_available() else "cpu"


def stage(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, stride, 1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
        nn.Conv3d(cout, cout, 3, 1, 1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1, self.e2, self.e3 = stage(1, W), stage(W, 2 * W, 2), stage(2 * W, 4 * W, 2)
        self.d2, self.d1 = stage(6 * W, 2 * W), stage(3 * W, W)
        self.out = nn.Conv3d(W, 4, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        c = self.e3(b)
        up = F.interpolate(c, scale_factor=2, mode="trilinear", align_corners=False)
        d = self.d2(torch.cat([up, b], dim=1))
        up = F.interpolate(d, scale_factor=2, mode="trilinear", align_corners=False)
        return self.out(self.d1(torch.cat([up, a], dim=1)))


model = UNet3D().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.99, nesterov=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 1, R, R, R, device=device)
    y = torch.randint(0, 4, (B, R, R, R), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
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
