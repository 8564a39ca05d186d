"""A deformable-convolution feature head (torchvision.ops.DeformConv2d, offsets and masks predicted
by plain convolutions, DCNv2) on a ResNet-18 trunk's stride-8 features: 3 deformable 3x3 layers of
256 channels over 16 images of 512x512, fp32, SGD with momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import DeformConv2d

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5201)
B, HW, C = (2, 64, 16) if SMALL else (16, 512, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


class DeformBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.offset = nn.Conv2d(cin, 27, 3, padding=1)
        self.conv = DeformConv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(32 if cout >= 32 else 4, cout)

    def forward(self, x):
        om = self.offset(x)
        offset, mask = om[:, :18], torch.sigmoid(om[:, 18:])
        return F.relu(self.norm(self.conv(x, offset, mask)))


trunk = torchvision.models.resnet18()
body = nn.Sequential(trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool, trunk.layer1, trunk.layer2)
head = nn.Sequential(DeformBlock(128, C), DeformBlock(C, C), DeformBlock(C, C), nn.Conv2d(C, 20, 1))
model = nn.Sequential(body, head).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    target = torch.randint(0, 20, (B, HW // 8, HW // 8), device=device)
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, target, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
