"""A Johnson-style fast style-transfer network: reflection-padded convolutions
(padding_mode="reflect"), InstanceNorm2d with affine weights, five residual blocks, nearest
upsampling then convolution; trained in fp32 on 256x256 images against a target with an L1 content
loss and a Gram-matrix style loss (bmm), batch 8, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3203)
B, R = (2, 32) if SMALL else (8, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


def conv(cin, cout, k, stride=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, padding_mode="reflect"), nn.InstanceNorm2d(cout, affine=True)
    )


class Res(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = conv(c, c, 3), conv(c, c, 3)

    def forward(self, x):
        return x + self.b(F.relu(self.a(x)))


net = nn.Sequential(
    conv(3, 32, 9),
    nn.ReLU(),
    conv(32, 64, 3, 2),
    nn.ReLU(),
    conv(64, 128, 3, 2),
    nn.ReLU(),
    *[Res(128) for _ in range(5)],
    nn.Upsample(scale_factor=2, mode="nearest"),
    conv(128, 64, 3),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    conv(64, 32, 3),
    nn.ReLU(),
    nn.Conv2d(32, 3, 9, 1, 4, padding_mode="reflect"),
).to(device)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)


def gram(x):
    b, c, h, w = x.shape
    f = x.view(b, c, h * w)
    return f.bmm(f.transpose(1, 2)) / (c * h * w)


style = torch.rand(1, 3, R, R, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 3, R, R, device=device)
    y = net(x)
    loss = F.l1_loss(y, x) + 10.0 * F.mse_loss(gram(y), gram(style).expand(B, -1, -1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
