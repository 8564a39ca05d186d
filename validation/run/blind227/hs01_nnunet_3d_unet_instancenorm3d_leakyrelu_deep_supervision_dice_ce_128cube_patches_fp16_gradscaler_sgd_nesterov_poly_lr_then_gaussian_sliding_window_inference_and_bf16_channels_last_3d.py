"""nnU-Net-style 3-D U-Net (Isensee et al. 2021) written by hand: 6 stages of two (Conv3d 3x3x3 ->
InstanceNorm3d(affine) -> LeakyReLU(0.01, inplace)) with 32-64-128-256-320-320 features and strided
convolutions for downsampling, ConvTranspose3d upsampling with skip concatenation, 1x1x1 segmentation heads on
every decoder level and deep supervision over the four finest scales (weights 1/2^i normalised; targets
downsampled by nearest interpolation). Loss: soft Dice over softmax (batch Dice, background excluded) + CE.

Phases: 4 training steps on random 128^3 patches at batch 2 (4 classes) under fp16 autocast with GradScaler,
SGD (momentum 0.99, nesterov) with nnU-Net's poly LR and gradient clipping to 12 after unscale_; sliding-window
inference under inference_mode (fp16 autocast) over a 1 x 1 x 224 x 224 x 224 volume with 128^3 windows at
step 0.5 (27 fixed windows, 3 per batch) weighted by a Gaussian importance map (sigma 1/8 of the patch) and
accumulated in fp32; then the model in channels_last_3d with bf16 autocast and a new SGD for 3 steps on
96 x 160 x 160 patches at batch 2. 3 phases."""

import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2271)
device = "cuda"
NC = 4
FEAT = (32, 64, 128, 256, 320, 320)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def conv_block(cin, cout, stride):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
        nn.Conv3d(cout, cout, 3, 1, 1, bias=False), nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True))


class UNet3D(nn.Module):
    def __init__(self, cin=1):
        super().__init__()
        self.enc = nn.ModuleList()
        c = cin
        for i, f in enumerate(FEAT):
            self.enc.append(conv_block(c, f, 1 if i == 0 else 2))
            c = f
        self.up, self.dec, self.heads = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i in range(len(FEAT) - 1, 0, -1):
            self.up.append(nn.ConvTranspose3d(FEAT[i], FEAT[i - 1], 2, 2, bias=False))
            self.dec.append(conv_block(2 * FEAT[i - 1], FEAT[i - 1], 1))
            self.heads.append(nn.Conv3d(FEAT[i - 1], NC, 1))

    def forward(self, x):
        skips = []
        for blk in self.enc:
            x = blk(x)
            skips.append(x)
        x = skips.pop()
        outs = []
        for up, dec, head in zip(self.up, self.dec, self.heads):
            x = dec(torch.cat([up(x), skips.pop()], 1))
            outs.append(head(x))
        return outs[::-1]  # finest first


def dice_ce(logits, target):
    ce = F.cross_entropy(logits, target)
    p = logits.float().softmax(1)
    oh = F.one_hot(target, NC).permute(0, 4, 1, 2, 3).float()
    dims = (0, 2, 3, 4)
    inter = (p * oh).sum(dims)
    den = p.sum(dims) + oh.sum(dims)
    dice = (2 * inter + 1e-5) / (den + 1e-5)
    return ce + (1 - dice[1:].mean())


DS_W = torch.tensor([1 / 2 ** i for i in range(4)])
DS_W = DS_W / DS_W.sum()


def ds_loss(outs, target):
    loss = 0.0
    for i in range(4):
        t = target if i == 0 else F.interpolate(target[:, None].float(), size=outs[i].shape[2:],
                                               mode="nearest")[:, 0].long()
        loss = loss + DS_W[i].item() * dice_ce(outs[i], t)
    return loss


def batch(b, shape):
    x = torch.randn(b, 1, *shape, device=device)
    y = torch.randint(0, NC, (b, *shape), device=device)
    return x, y


model = UNet3D().to(device)
print("params", sum(p.numel() for p in model.parameters()))
EPOCHS = 4
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: (1 - e / EPOCHS) ** 0.9)
scaler = torch.amp.GradScaler("cuda")
for step in range(EPOCHS):
    x, y = batch(2, (128, 128, 128))
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        outs = model(x)
        loss = ds_loss(outs, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 12)
    scaler.step(opt)
    scaler.update()
    sched.step()
    print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.5f}")
del outs, loss, x, y
print("train max allocated", torch.cuda.max_memory_allocated())
report("fp16 train 128^3")


def gaussian_map(patch, sigma_scale=1 / 8):
    axes = []
    for s in patch:
        r = torch.arange(s, dtype=torch.float32, device=device) - (s - 1) / 2
        axes.append(torch.exp(-0.5 * (r / (s * sigma_scale)) ** 2))
    g = axes[0][:, None, None] * axes[1][None, :, None] * axes[2][None, None, :]
    g = g / g.max()
    return g.clamp_min(g[g > 0].min())


model.eval()
VOL, P = 224, 128
starts = [0, 48, 96]  # step 0.5 of 128 over 224: ceil(96/64)+1 = 3 positions, evenly spaced
with torch.inference_mode():
    vol = torch.randn(1, 1, VOL, VOL, VOL, device=device)
    g = gaussian_map((P, P, P))
    acc = torch.zeros(NC, VOL, VOL, VOL, device=device)
    norm = torch.zeros(1, VOL, VOL, VOL, device=device)
    coords = list(itertools.product(starts, starts, starts))
    for i in range(0, len(coords), 3):
        cs = coords[i:i + 3]
        crop = torch.cat([vol[:, :, a:a + P, b:b + P, c:c + P] for a, b, c in cs])
        with torch.autocast("cuda", dtype=torch.float16):
            pred = model(crop)[0]
        pred = pred.float() * g
        for j, (a, b, c) in enumerate(cs):
            acc[:, a:a + P, b:b + P, c:c + P] += pred[j]
            norm[:, a:a + P, b:b + P, c:c + P] += g
    seg = (acc / norm).argmax(0).to(torch.uint8)
print("sliding window seg", tuple(seg.shape), "windows", len(coords), "max alloc", torch.cuda.max_memory_allocated())
del vol, acc, norm, seg, pred, crop, g
report("sliding window inference 224^3")

model.train()
model = model.to(memory_format=torch.channels_last_3d)
del opt, sched, scaler
opt = torch.optim.SGD(model.parameters(), lr=5e-3, momentum=0.99, nesterov=True, weight_decay=3e-5)
for step in range(3):
    x, y = batch(2, (96, 160, 160))
    x = x.contiguous(memory_format=torch.channels_last_3d)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = model(x)
        loss = ds_loss(outs, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 12)
    opt.step()
    print(f"bf16 cl3d step {step} loss {loss.item():.4f}")
del outs, loss
report("bf16 channels_last_3d train 96x160x160")
