"""A plain segmentation UNet written by hand (4 levels, 64 to 512 channels, 3 x 3 convolutions with
GroupNorm and SiLU, max-pool down, transposed-convolution up, skip concatenations, 1 x 1 head to 4
classes) with `torch.backends.cudnn.benchmark = True`: fp32 Adam at batch 8 x 256 x 256, two steps;
inference under no_grad at batch 2 x 512 x 512 (new problems); bf16-autocast training at batch 8 x 256
x 256 (new problems in bf16), two steps.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.manual_seed(2423)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.GroupNorm(8, cout),
        nn.SiLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.GroupNorm(8, cout),
        nn.SiLU(),
    )


class UNet(nn.Module):
    def __init__(self, ch=(64, 128, 256, 512)):
        super().__init__()
        self.downs = nn.ModuleList()
        cin = 3
        for c in ch:
            self.downs.append(block(cin, c))
            cin = c
        self.ups = nn.ModuleList(nn.ConvTranspose2d(c, c // 2, 2, stride=2) for c in ch[:0:-1])
        self.dec = nn.ModuleList(block(c, c // 2) for c in ch[:0:-1])
        self.head = nn.Conv2d(ch[0], 4, 1)

    def forward(self, x):
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x)
            if i < len(self.downs) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, dec in zip(self.ups, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


model = UNet().cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
report("setup")

for _ in range(2):
    x = torch.randn(8, 3, 256, 256, device="cuda")
    y = torch.randint(0, 4, (8, 256, 256), device="cuda")
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del x, y, loss
report("train_fp32_256")

with torch.no_grad():
    out = model(torch.randn(2, 3, 512, 512, device="cuda"))
    del out
report("inference_fp32_512")

for _ in range(2):
    x = torch.randn(8, 3, 256, 256, device="cuda")
    y = torch.randint(0, 4, (8, 256, 256), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del x, y, loss
report("train_bf16_autocast_256")
