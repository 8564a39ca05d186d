"""V-Net (Milletari et al. 2016) written by hand after mattmacy/vnet.pytorch, for prostate MRI segmentation
(foreground / background): 1 x 64 x 128 x 128 volumes.

Network: an input transition (Conv3d 1 -> 16, k 5, BatchNorm3d, PReLU, added to the input repeated 16
times); four down transitions (Conv3d k 2 stride 2 doubling the channels to 32, 64, 128, 256, BatchNorm3d,
PReLU, then 1, 2, 3, 2 LUConvs of Conv3d k 5 + BatchNorm3d + PReLU, residual add and PReLU; Dropout3d in the
two deepest); four up transitions (ConvTranspose3d k 2 stride 2, BatchNorm3d, PReLU, Dropout3d on the skip,
torch.cat, 2, 2, 1, 1 LUConvs, residual add); an output transition (Conv3d 32 -> 2, k 5, BatchNorm3d, PReLU,
1x1x1 conv) and a softmax over the two channels.

Loss: V-Net's Dice with squared denominators on the foreground probability. Training: fp32, SGD (lr 1e-3,
momentum 0.99), batch 4 as 2 micro-batches of 2 with gradient accumulation (loss / 2). Phases: the first
step; 3 more; the network cast with .half() and run under torch.no_grad on one whole 1 x 128 x 256 x 256
volume (BatchNorm in eval), the mask moved to the host; then test-time augmentation of 2 volumes of
64 x 160 x 160, each with its 4 flips (none, D, H, W) batched together, probabilities flipped back and
averaged. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_05)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    MICRO, ACCUM, STEPS, VOL, FULL, TTA = 1, 2, 1, (16, 32, 32), (32, 64, 64), (16, 48, 48)
else:
    MICRO, ACCUM, STEPS, VOL, FULL, TTA = 2, 2, 3, (64, 128, 128), (128, 256, 256), (64, 160, 160)


class LUConv(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1 = nn.Conv3d(ch, ch, kernel_size=5, padding=2)
        self.bn1 = nn.BatchNorm3d(ch)
        self.relu1 = nn.PReLU(ch)

    def forward(self, x):
        return self.relu1(self.bn1(self.conv1(x)))


def make_nconv(ch, depth):
    return nn.Sequential(*[LUConv(ch) for _ in range(depth)])


class InputTransition(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(1, 16, kernel_size=5, padding=2)
        self.bn1 = nn.BatchNorm3d(16)
        self.relu1 = nn.PReLU(16)

    def forward(self, x):
        out = self.bn1(self.conv1(x))
        x16 = torch.cat([x] * 16, 1)
        return self.relu1(torch.add(out, x16))


class DownTransition(nn.Module):
    def __init__(self, inch, nconvs, dropout=False):
        super().__init__()
        outch = 2 * inch
        self.down_conv = nn.Conv3d(inch, outch, kernel_size=2, stride=2)
        self.bn1 = nn.BatchNorm3d(outch)
        self.relu1 = nn.PReLU(outch)
        self.relu2 = nn.PReLU(outch)
        self.do1 = nn.Dropout3d() if dropout else nn.Identity()
        self.ops = make_nconv(outch, nconvs)

    def forward(self, x):
        down = self.relu1(self.bn1(self.down_conv(x)))
        out = self.ops(self.do1(down))
        return self.relu2(torch.add(out, down))


class UpTransition(nn.Module):
    def __init__(self, inch, outch, nconvs, dropout=False):
        super().__init__()
        self.up_conv = nn.ConvTranspose3d(inch, outch // 2, kernel_size=2, stride=2)
        self.bn1 = nn.BatchNorm3d(outch // 2)
        self.do1 = nn.Dropout3d() if dropout else nn.Identity()
        self.do2 = nn.Dropout3d()
        self.relu1 = nn.PReLU(outch // 2)
        self.relu2 = nn.PReLU(outch)
        self.ops = make_nconv(outch, nconvs)

    def forward(self, x, skipx):
        out = self.do1(x)
        skipxdo = self.do2(skipx)
        out = self.relu1(self.bn1(self.up_conv(out)))
        xcat = torch.cat((out, skipxdo), 1)
        out = self.ops(xcat)
        return self.relu2(torch.add(out, xcat))


class OutputTransition(nn.Module):
    def __init__(self, inch):
        super().__init__()
        self.conv1 = nn.Conv3d(inch, 2, kernel_size=5, padding=2)
        self.bn1 = nn.BatchNorm3d(2)
        self.conv2 = nn.Conv3d(2, 2, kernel_size=1)
        self.relu1 = nn.PReLU(2)

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        return F.softmax(self.conv2(out), dim=1)


class VNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_tr = InputTransition()
        self.down_tr32 = DownTransition(16, 1)
        self.down_tr64 = DownTransition(32, 2)
        self.down_tr128 = DownTransition(64, 3, dropout=True)
        self.down_tr256 = DownTransition(128, 2, dropout=True)
        self.up_tr256 = UpTransition(256, 256, 2, dropout=True)
        self.up_tr128 = UpTransition(256, 128, 2, dropout=True)
        self.up_tr64 = UpTransition(128, 64, 1)
        self.up_tr32 = UpTransition(64, 32, 1)
        self.out_tr = OutputTransition(32)

    def forward(self, x):
        out16 = self.in_tr(x)
        out32 = self.down_tr32(out16)
        out64 = self.down_tr64(out32)
        out128 = self.down_tr128(out64)
        out256 = self.down_tr256(out128)
        out = self.up_tr256(out256, out128)
        out = self.up_tr128(out, out64)
        out = self.up_tr64(out, out32)
        out = self.up_tr32(out, out16)
        return self.out_tr(out)


def dice_loss(probs, target):
    p = probs[:, 1]
    inter = (p * target).sum(dim=(1, 2, 3))
    union = (p * p).sum(dim=(1, 2, 3)) + (target * target).sum(dim=(1, 2, 3))
    return (1 - 2 * inter / (union + 1e-6)).mean()


model = VNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.99)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS + 1):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(ACCUM):
        x = torch.randn(MICRO, 1, *VOL, device=device)
        y = (torch.rand(MICRO, *VOL, device=device) > 0.8).float()
        loss = dice_loss(model(x), y) / ACCUM
        loss.backward()
        total += loss.item()
    opt.step()
    print(f"step {step} dice loss {total:.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
model.half()
with torch.no_grad():
    vol = torch.randn(1, 1, *FULL, device=device, dtype=torch.float16)
    mask = (model(vol)[:, 1] > 0.5).to(torch.uint8).cpu()
print(f"full volume mask {tuple(mask.shape)} foreground {int(mask.sum())}")
del vol
if device == "cuda":
    print(f"full volume peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

flip_dims = [None, (2,), (3,), (4,)]
with torch.no_grad():
    for i in range(2):
        vol = torch.randn(1, 1, *TTA, device=device, dtype=torch.float16)
        batch = torch.cat([vol if d is None else torch.flip(vol, d) for d in flip_dims])
        probs = model(batch)
        back = [
            probs[j : j + 1] if d is None else torch.flip(probs[j : j + 1], d)
            for j, d in enumerate(flip_dims)
        ]
        avg = torch.stack(back).float().mean(0)
        print(f"tta volume {i} foreground fraction {(avg[:, 1] > 0.5).float().mean().item():.4f}")
if device == "cuda":
    print(
        f"tta allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
