"""SegNet: a VGG-style encoder whose max-pools return their indices and a decoder that
`max_unpool2d`s with them, per-pixel `nll_loss` over `log_softmax` (21 classes) under bf16
autocast; 8 images of 384x384, fp32 weights, SGD with momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5205)
B, HW, WIDTHS = (2, 32, (8, 16, 16)) if SMALL else (8, 384, (64, 128, 256, 512))
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        chans = (3, *WIDTHS)
        self.enc = nn.ModuleList([block(chans[i], chans[i + 1]) for i in range(len(WIDTHS))])
        self.dec = nn.ModuleList(
            [block(chans[i + 1], chans[i] if i else 64) for i in reversed(range(len(WIDTHS)))]
        )
        self.out = nn.Conv2d(64, 21, 1)

    def forward(self, x):
        indices, sizes = [], []
        for enc in self.enc:
            x = enc(x)
            sizes.append(x.shape)
            x, idx = F.max_pool2d(x, 2, 2, return_indices=True)
            indices.append(idx)
        for dec in self.dec:
            x = F.max_unpool2d(x, indices.pop(), 2, 2, output_size=sizes.pop()[-2:])
            x = dec(x)
        return F.log_softmax(self.out(x), dim=1)


model = SegNet().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    target = torch.randint(0, 21, (B, HW, HW), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logp = model(x)
    loss = F.nll_loss(logp.float(), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, target, logp, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
