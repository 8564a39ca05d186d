"""Semi-supervised BraTS segmentation with a mean teacher (Tarvainen & Valpola; as in UA-MT) around a
SegResNet (Myronenko 2018) written by hand after MONAI's networks.nets.SegResNet: 4 MRI modalities in, 3
sigmoid channels out (TC, WT, ET), init_filters 32, GroupNorm(8) + ReLU pre-activation residual blocks (1, 2,
2, 4 in the encoder with stride-2 Conv3d between levels, 1, 1, 1 in the decoder), Dropout3d(0.2) after the
stem, decoder upsampling by a 1x1x1 Conv3d halving the channels + trilinear nn.Upsample, skips added.

Data: 2 labelled and 2 unlabelled whole volumes of 4 x 240 x 240 x 155 (fp32 images, uint8 label maps) are
kept on the device; each iteration draws random 128^3 crops (offsets drawn on the host) by slicing them. The
teacher is a dict of EMA parameters (decay 0.99, updated under no_grad after each step) evaluated with
torch.func.functional_call on the student module. Loss: sigmoid soft Dice on the labelled crops plus a
ramped-up MSE consistency between student and teacher sigmoid outputs on the unlabelled crops under
independent Gaussian input noise. fp16 autocast + torch.amp.GradScaler, Adam(lr 1e-4, weight decay 1e-5), 2
labelled + 2 unlabelled crops per iteration.

Phases: the first iteration; 3 more; no_grad validation of student and teacher on 2 labelled crops (fp16
autocast, per-channel Dice); then the optimizer, scaler and training volumes deleted and
torch.cuda.empty_cache(), the teacher weights loaded into the module, .half(), and one whole 4 x 240 x 240
x 155 volume (padded to 160 slices) segmented under torch.inference_mode, the mask moved to the host. 4
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_06)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    VOL, CROP, STEPS, INIT = (64, 64, 40), 32, 1, 8
else:
    VOL, CROP, STEPS, INIT = (240, 240, 155), 128, 3, 32
IN_CH, OUT_CH = 4, 3


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, ch)
        self.conv1 = nn.Conv3d(ch, ch, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(8, ch)
        self.conv2 = nn.Conv3d(ch, ch, 3, padding=1, bias=False)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        x = self.conv1(self.act(self.norm1(x)))
        x = self.conv2(self.act(self.norm2(x)))
        x += identity
        return x


class SegResNet(nn.Module):
    def __init__(self, blocks_down=(1, 2, 2, 4), blocks_up=(1, 1, 1)):
        super().__init__()
        self.convInit = nn.Conv3d(IN_CH, INIT, 3, padding=1, bias=False)
        self.dropout = nn.Dropout3d(0.2)
        self.down_layers = nn.ModuleList()
        for i, n in enumerate(blocks_down):
            ch = INIT * 2**i
            pre = nn.Conv3d(ch // 2, ch, 3, stride=2, padding=1, bias=False) if i > 0 else nn.Identity()
            self.down_layers.append(nn.Sequential(pre, *[ResBlock(ch) for _ in range(n)]))
        self.up_samples = nn.ModuleList()
        self.up_layers = nn.ModuleList()
        for i, n in enumerate(blocks_up):
            ch = INIT * 2 ** (len(blocks_up) - i)
            self.up_samples.append(
                nn.Sequential(
                    nn.Conv3d(ch, ch // 2, 1, bias=False),
                    nn.Upsample(scale_factor=2, mode="trilinear", align_corners=False),
                )
            )
            self.up_layers.append(nn.Sequential(*[ResBlock(ch // 2) for _ in range(n)]))
        self.conv_final = nn.Sequential(
            nn.GroupNorm(8, INIT), nn.ReLU(inplace=True), nn.Conv3d(INIT, OUT_CH, 1, bias=True)
        )

    def forward(self, x):
        x = self.dropout(self.convInit(x))
        skips = []
        for down in self.down_layers:
            x = down(x)
            skips.append(x)
        skips.pop()
        for up, upl in zip(self.up_samples, self.up_layers, strict=True):
            x = up(x) + skips.pop()
            x = upl(x)
        return self.conv_final(x)


def dice_per_channel(probs, target):
    dims = [0, 2, 3, 4]
    inter = (probs * target).sum(dims)
    return (2 * inter + 1e-5) / (probs.sum(dims) + target.sum(dims) + 1e-5)


model = SegResNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
teacher = {n: p.detach().clone() for n, p in model.named_parameters()}
opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-5)
scaler = torch.amp.GradScaler("cuda", enabled=amp)

images = [torch.randn(IN_CH, *VOL, device=device) for _ in range(2)]
labels = [torch.randint(0, 4, VOL, device=device, dtype=torch.uint8) for _ in range(2)]
unlabelled = [torch.randn(IN_CH, *VOL, device=device) for _ in range(2)]
if device == "cuda":
    print(f"model and volumes {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def random_crop(*vols):
    starts = [int(torch.randint(0, s - CROP + 1, ()).item()) for s in VOL]
    sl = tuple(slice(s, s + CROP) for s in starts)
    return [v[(..., *sl)] for v in vols]


def brats_regions(lab):
    # label map -> (TC, WT, ET) channels
    tc = (lab == 1) | (lab == 3)
    wt = lab > 0
    et = lab == 3
    return torch.stack([tc, wt, et]).float()


def ema_update(alpha=0.99):
    with torch.no_grad():
        for n, p in model.named_parameters():
            teacher[n].mul_(alpha).add_(p.detach(), alpha=1 - alpha)


model.train()
for it in range(STEPS + 1):
    xs, ys = [], []
    for img, lab in zip(images, labels, strict=True):
        x, y = random_crop(img, lab)
        xs.append(x)
        ys.append(brats_regions(y))
    x = torch.stack(xs)
    y = torch.stack(ys)
    u = torch.stack([random_crop(v)[0] for v in unlabelled])
    consistency_w = 0.1 * min(1.0, (it + 1) / 40)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        student_in = torch.cat([x, u + 0.1 * torch.randn_like(u)])
        out = model(student_in)
        with torch.no_grad():
            t_out = functional_call(model, teacher, (u + 0.1 * torch.randn_like(u),))
        probs = torch.sigmoid(out.float())
        sup = 1 - dice_per_channel(probs[: len(xs)], y).mean()
        cons = F.mse_loss(probs[len(xs) :], torch.sigmoid(t_out.float()))
        loss = sup + consistency_w * cons
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    ema_update()
    print(f"iter {it} loss {loss.item():.4f} sup {sup.item():.4f} cons {cons.item():.5f}")
    if it == 0 and device == "cuda":
        print(f"first iter peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, u, xs, ys, student_in, out, t_out, probs, sup, cons, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    crops = [random_crop(img, lab) for img, lab in zip(images, labels, strict=True)]
    x = torch.stack([c[0] for c in crops])
    y = torch.stack([brats_regions(c[1]) for c in crops])
    d_student = dice_per_channel((torch.sigmoid(model(x).float()) > 0.5).float(), y)
    d_teacher = dice_per_channel(
        (torch.sigmoid(functional_call(model, teacher, (x,)).float()) > 0.5).float(), y
    )
print(f"val dice student {d_student.tolist()} teacher {d_teacher.tolist()}")
del crops, x, y
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, scaler, images, labels, unlabelled
if device == "cuda":
    torch.cuda.empty_cache()
model.load_state_dict(teacher)
teacher.clear()
model.half()
pad = (-VOL[2]) % 16
with torch.inference_mode():
    vol = torch.randn(1, IN_CH, *VOL, device=device, dtype=torch.float16)
    vol = F.pad(vol, (0, pad))
    mask = (torch.sigmoid(model(vol)) > 0.5)[..., : VOL[2]].to(torch.uint8).cpu()
print(f"whole volume mask {tuple(mask.shape)} wt voxels {int(mask[:, 1].sum())}")
if device == "cuda":
    print(
        f"inference allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
