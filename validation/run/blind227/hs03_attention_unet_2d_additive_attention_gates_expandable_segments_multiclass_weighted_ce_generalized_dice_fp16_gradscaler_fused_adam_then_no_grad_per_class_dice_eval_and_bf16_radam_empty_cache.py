"""Attention U-Net (Oktay et al. 2018) written by hand for 4-class 2-D cardiac MRI segmentation (background,
LV, RV, myocardium style) with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.
Encoder 64-128-256-512-1024 (Conv3x3-BatchNorm-ReLU x 2, max-pool); decoder with Upsample(scale 2) + conv
and additive attention gates on every skip: theta_x (1x1 stride-2 conv on the skip), phi_g (1x1 on the gating
signal), ReLU, psi (1x1 to one channel), sigmoid, bilinear upsampling of the coefficients back to the skip's
size and a multiplication with the skip. Loss: class-weighted cross entropy + generalized Dice (weights
1/(sum of one-hot)^2) on softmax probabilities.

Phases: 4 steps at batch 32 on 256 x 256 (1 channel) under fp16 autocast with GradScaler and fused Adam;
no_grad evaluation at batch 64: argmax predictions, one-hot against random labels and per-class Dice
accumulated over 4 batches; then optimizer.zero_grad(set_to_none=True), the Adam deleted,
torch.cuda.empty_cache() and 3 steps of foreach RAdam under bf16 autocast at batch 48 on 320 x 320.
3 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2273)
device = "cuda"
NC = 4
CH = (64, 128, 256, 512, 1024)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class AttentionGate(nn.Module):
    def __init__(self, cx, cg, ci):
        super().__init__()
        self.theta = nn.Conv2d(cx, ci, 1, stride=2, bias=False)
        self.phi = nn.Conv2d(cg, ci, 1)
        self.psi = nn.Conv2d(ci, 1, 1)
        self.out = nn.Sequential(nn.Conv2d(cx, cx, 1), nn.BatchNorm2d(cx))

    def forward(self, x, g):
        t = self.theta(x)
        p = F.interpolate(self.phi(g), size=t.shape[2:], mode="bilinear", align_corners=False)
        a = torch.sigmoid(self.psi(F.relu(t + p)))
        a = F.interpolate(a, size=x.shape[2:], mode="bilinear", align_corners=False)
        return self.out(a.expand_as(x) * x), a


class AttUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2)
        self.enc = nn.ModuleList(conv_block(1 if i == 0 else CH[i - 1], CH[i]) for i in range(5))
        self.up = nn.ModuleList()
        self.gate = nn.ModuleList()
        self.dec = nn.ModuleList()
        for i in range(4, 0, -1):
            self.up.append(nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(CH[i], CH[i - 1], 3, padding=1),
                                         nn.BatchNorm2d(CH[i - 1]), nn.ReLU(inplace=True)))
            self.gate.append(AttentionGate(CH[i - 1], CH[i], CH[i - 1] // 2))
            self.dec.append(conv_block(2 * CH[i - 1], CH[i - 1]))
        self.head = nn.Conv2d(CH[0], NC, 1)

    def forward(self, x):
        skips = []
        for i, blk in enumerate(self.enc):
            x = blk(x if i == 0 else self.pool(x))
            skips.append(x)
        g = skips.pop()
        for up, gate, dec in zip(self.up, self.gate, self.dec):
            s = skips.pop()
            att, _ = gate(s, g)
            g = dec(torch.cat([att, up(g)], 1))
        return self.head(g)


CLASS_W = torch.tensor([0.1, 1.0, 1.0, 1.0], device=device)


def loss_fn(logits, y):
    ce = F.cross_entropy(logits.float(), y, weight=CLASS_W)
    p = logits.float().softmax(1)
    oh = F.one_hot(y, NC).permute(0, 3, 1, 2).float()
    w = 1.0 / (oh.sum((0, 2, 3)) ** 2).clamp_min(1e-6)
    inter = (w * (p * oh).sum((0, 2, 3))).sum()
    union = (w * (p + oh).sum((0, 2, 3))).sum()
    return ce + 1 - 2 * inter / union


def batch(b, s):
    return torch.randn(b, 1, s, s, device=device), torch.randint(0, NC, (b, s, s), device=device)


model = AttUNet().to(device)
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
scaler = torch.amp.GradScaler("cuda")
for step in range(4):
    x, y = batch(32, 256)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
del loss, x, y
print("fp16 train max allocated", torch.cuda.max_memory_allocated())
report("fp16 gradscaler train 256")

model.eval()
inter = torch.zeros(NC, device=device)
denom = torch.zeros(NC, device=device)
with torch.no_grad():
    for _ in range(4):
        x, y = batch(64, 256)
        with torch.autocast("cuda", dtype=torch.float16):
            pred = model(x).argmax(1)
        po = F.one_hot(pred, NC).permute(0, 3, 1, 2)
        yo = F.one_hot(y, NC).permute(0, 3, 1, 2)
        inter += (po & yo).sum((0, 2, 3))
        denom += po.sum((0, 2, 3)) + yo.sum((0, 2, 3))
dice = 2 * inter / denom.clamp_min(1)
print("per-class dice", [round(v, 4) for v in dice.tolist()])
del x, y, pred, po, yo
report("no_grad eval dice")

opt.zero_grad(set_to_none=True)
del opt, scaler
torch.cuda.empty_cache()
print("after empty_cache reserved", torch.cuda.memory_reserved())
model.train()
opt = torch.optim.RAdam(model.parameters(), lr=1e-3, foreach=True)
for step in range(3):
    x, y = batch(48, 320)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    print(f"bf16 radam step {step} loss {loss.item():.4f}")
del loss
report("bf16 radam train 320")
