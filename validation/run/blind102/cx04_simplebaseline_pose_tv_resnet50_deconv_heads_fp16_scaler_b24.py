"""SimpleBaseline human-pose estimation: a torchvision ResNet-50 trunk (no pooling / fc) followed by
three ConvTranspose2d(4, stride 2) + BatchNorm + ReLU deconvolution layers and a 1x1 head giving 17
keypoint heatmaps at 1/4 of 256 x 192 person crops; Gaussian target heatmaps drawn on the GPU from
meshgrid coordinates, MSE weighted by keypoint visibility; fp16 autocast with GradScaler, Adam,
batch 24, 3 steps; then a flip-test evaluation (original + horizontally flipped, heatmaps averaged)
of 40 crops under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10204)
B, H, W, STEPS, K = (2, 64, 64, 2, 17) if SMALL else (24, 256, 192, 3, 17)
device = "cuda" if torch.cuda.is_available() else "cpu"
FLIP = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]


class PoseNet(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet50()
        self.trunk = nn.Sequential(*list(r.children())[:-2])
        layers, cin = [], 2048
        for _ in range(3):
            layers += [
                nn.ConvTranspose2d(cin, 256, 4, 2, 1, bias=False),
                nn.BatchNorm2d(256),
                nn.ReLU(inplace=True),
            ]
            cin = 256
        self.deconv = nn.Sequential(*layers)
        self.head = nn.Conv2d(256, K, 1)

    def forward(self, x):
        return self.head(self.deconv(self.trunk(x)))


def targets(n):
    h, w = H // 4, W // 4
    ys, xs = torch.meshgrid(
        torch.arange(h, device=device, dtype=torch.float32),
        torch.arange(w, device=device, dtype=torch.float32),
        indexing="ij",
    )
    cy = torch.rand(n, K, 1, 1, device=device) * h
    cx = torch.rand(n, K, 1, 1, device=device) * w
    hm = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * 2.0**2))
    vis = (torch.rand(n, K, 1, 1, device=device) > 0.2).float()
    return hm, vis


model = PoseNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    img = torch.randn(B, 3, H, W, device=device)
    hm, vis = targets(B)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        pred = model(img)
    loss = (((pred.float() - hm) ** 2) * vis).mean() * 0.5
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.5f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del img, hm, vis, pred, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    img = torch.randn(B + 16, 3, H, W, device=device)
    a = model(img)
    b = model(img.flip(3)).flip(3)[:, FLIP]
    heat = (a + b) * 0.5
    flat = heat.flatten(2).argmax(-1)
if device == "cuda":
    print(
        f"eval {flat.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
