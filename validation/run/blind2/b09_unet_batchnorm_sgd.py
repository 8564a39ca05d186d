"""UNet segmentation net (Conv+BatchNorm2d+ReLU, MaxPool down, ConvTranspose2d up, torch.cat skips), fp32,
SGD momentum with zero_grad(set_to_none=False), clip_grad_value_, per-pixel cross-entropy;
then eval under no_grad."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, IMG, BASE, CLASSES = (2, 32, 8, 4) if os.environ.get("SMOKE") else (16, 256, 32, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(11)


def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, cin=3, classes=CLASSES, base=BASE):
        super().__init__()
        chans = [base, base * 2, base * 4, base * 8]
        self.downs = nn.ModuleList()
        prev = cin
        for c in chans:
            self.downs.append(double_conv(prev, c))
            prev = c
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(chans[-1], chans[-1] * 2)
        self.ups = nn.ModuleList()
        self.up_convs = nn.ModuleList()
        prev = chans[-1] * 2
        for c in reversed(chans):
            self.ups.append(nn.ConvTranspose2d(prev, c, kernel_size=2, stride=2))
            self.up_convs.append(double_conv(c * 2, c))
            prev = c
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips), strict=True):
            x = up(x)
            x = conv(torch.cat([skip, x], dim=1))
        return self.head(x)


model = UNet().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.95, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    masks = torch.randint(0, CLASSES, (B, IMG, IMG), device=device)
    optimizer.zero_grad(set_to_none=False)
    logits = model(images)
    loss = F.cross_entropy(logits, masks)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
    optimizer.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pred = model(torch.randn(B * 2, 3, IMG, IMG, device=device)).argmax(dim=1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(pred.shape, pred.float().mean().item())
