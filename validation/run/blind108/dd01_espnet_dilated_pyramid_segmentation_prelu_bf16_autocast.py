"""ESPNet-C semantic segmentation, hand-written: a strided 3x3 stem of 16 channels, ESP modules
(a 1x1 reduction to d = n / 5 channels, five parallel dilated 3x3 convolutions at rates 1, 2, 4, 8,
16, hierarchical feature fusion by running sums, concatenation, BatchNorm + PReLU, residual adds),
input reinjection of the downsampled image at each level, a 1x1 classifier over 20 classes and
bilinear upsampling; batch 6 of 384 x 768 street-scene-sized images, class-weighted cross entropy
with ignore_index 255, bf16 autocast, Adam, 3 steps; then an evaluation of 4 images under
inference_mode with a horizontal-flip test-time average; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10801)
B, H, W, STEPS = (2, 64, 128, 2) if SMALL else (6, 384, 768, 3)
NCLS = 20
device = "cuda" if torch.cuda.is_available() else "cpu"


class CBR(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.act = nn.PReLU(cout)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class ESP(nn.Module):
    """Reduce, split, transform with dilated 3x3 convolutions, merge by hierarchical sums."""

    def __init__(self, cin, cout, down=False, add=True):
        super().__init__()
        n = cout // 5
        n1 = cout - 4 * n
        self.reduce = nn.Conv2d(cin, n, 3 if down else 1, 2 if down else 1, 1 if down else 0, bias=False)
        self.d1 = nn.Conv2d(n, n1, 3, 1, 1, bias=False)
        self.d2 = nn.Conv2d(n, n, 3, 1, 2, dilation=2, bias=False)
        self.d4 = nn.Conv2d(n, n, 3, 1, 4, dilation=4, bias=False)
        self.d8 = nn.Conv2d(n, n, 3, 1, 8, dilation=8, bias=False)
        self.d16 = nn.Conv2d(n, n, 3, 1, 16, dilation=16, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.act = nn.PReLU(cout)
        self.add = add and not down and cin == cout

    def forward(self, x):
        r = self.reduce(x)
        d1, d2, d4, d8, d16 = self.d1(r), self.d2(r), self.d4(r), self.d8(r), self.d16(r)
        a1 = d2
        a2 = a1 + d4
        a3 = a2 + d8
        a4 = a3 + d16
        out = torch.cat([d1, a1, a2, a3, a4], 1)
        if self.add:
            out = x + out
        return self.act(self.bn(out))


class ESPNetC(nn.Module):
    def __init__(self, p=2, q=3):
        super().__init__()
        self.level1 = CBR(3, 16, 3, 2)
        self.sample1 = nn.AvgPool2d(3, 2, 1)
        self.sample2 = nn.Sequential(nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1))
        self.b1 = nn.Sequential(nn.BatchNorm2d(19, eps=1e-3), nn.PReLU(19))
        self.level2_0 = ESP(19, 64, down=True)
        self.level2 = nn.Sequential(*[ESP(64, 64) for _ in range(p)])
        self.b2 = nn.Sequential(nn.BatchNorm2d(131, eps=1e-3), nn.PReLU(131))
        self.level3_0 = ESP(131, 128, down=True)
        self.level3 = nn.Sequential(*[ESP(128, 128) for _ in range(q)])
        self.b3 = nn.Sequential(nn.BatchNorm2d(256, eps=1e-3), nn.PReLU(256))
        self.classifier = nn.Conv2d(256, NCLS, 1)

    def forward(self, img):
        o1 = self.level1(img)
        i1, i2 = self.sample1(img), self.sample2(img)
        c1 = self.b1(torch.cat([o1, i1], 1))
        o2_0 = self.level2_0(c1)
        o2 = self.level2(o2_0)
        c2 = self.b2(torch.cat([o2, o2_0, i2], 1))
        o3_0 = self.level3_0(c2)
        o3 = self.level3(o3_0)
        c3 = self.b3(torch.cat([o3_0, o3], 1))
        logits = self.classifier(c3)
        return F.interpolate(logits, size=img.shape[-2:], mode="bilinear", align_corners=False)


model = ESPNetC().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=2e-4)
class_w = torch.linspace(0.5, 2.0, NCLS, device=device)
gen = torch.Generator(device=device).manual_seed(8)


def batch(n):
    img = torch.randn(n, 3, H, W, device=device, generator=gen)
    lab = torch.randint(0, NCLS, (n, H, W), device=device, generator=gen)
    lab[:, : H // 8] = 255
    return img, lab


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    img, lab = batch(B)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(img)
    loss = F.cross_entropy(out.float(), lab, weight=class_w, ignore_index=255)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del img, lab, out, loss
model.eval()
with torch.inference_mode():
    img, lab = batch(4)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        prob = model(img).float().softmax(1) + model(img.flip(-1)).float().softmax(1).flip(-1)
    pred = prob.argmax(1)
    valid = lab != 255
    acc = (pred[valid] == lab[valid]).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
