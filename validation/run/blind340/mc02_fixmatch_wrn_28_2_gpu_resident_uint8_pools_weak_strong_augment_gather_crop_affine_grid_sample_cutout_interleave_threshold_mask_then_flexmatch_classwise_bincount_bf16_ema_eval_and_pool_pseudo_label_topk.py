"""Semi-supervised CIFAR-10 training the way the FixMatch reference re-implementation (kekmodel/FixMatch-
pytorch) writes it, with the data and both augmentations on the GPU: WideResNet-28-2 (BatchNorm momentum
0.001, LeakyReLU 0.1 in place, activate_before_residual), 4,000 labelled and 50,000 unlabelled images kept
on the GPU as uint8. Weak augmentation: horizontal flip by `torch.where` and a random 4-pixel translation
as a reflect pad plus a per-sample crop by advanced indexing; strong augmentation: the weak one, then a
per-sample random rotation and shear through `F.affine_grid` + `F.grid_sample`, brightness, contrast,
solarize and posterize by tensor ops, and a 16 x 16 Cutout from `arange` comparisons. Labelled batch 64, mu
= 7 (448 weak + 448 strong unlabelled images): one forward of 960 images interleaved for BatchNorm
(`interleave` / `de_interleave` by reshape/transpose), pseudo-labels from the detached weak logits, a 0.95
confidence mask multiplied into the unlabelled loss (never used to index). SGD nesterov 0.03, momentum 0.9,
weight decay 5e-4 except BatchNorm and biases, cosine LambdaLR, ModelEMA (0.999) updated through state_dict
copies.

Phases: 0 the pools, model, optimizer, scheduler, EMA copy; 1 three FixMatch steps in fp32; 2 three
FlexMatch steps under bf16 autocast: class-wise thresholds from a learning status over the unlabelled pool
(`selected_label`, -1 until a sample's pseudo-label passes the threshold, written by index with the batch's
pool indices; class counts by `torch.bincount` with minlength), the convex threshold mapping; 3 the EMA
model's accuracy over 10,000 test images in batches of 1,000 under no_grad; 4 the EMA model pseudo-labels
the whole unlabelled pool under inference_mode in batches of 2,500, then keeps the 400 most confident
images per class (`topk` over masked confidences) and gathers them from the uint8 pool into a new labelled
set."""

import copy
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3402)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    N_LAB, N_UNLAB, N_TEST, B, MU, EVAL_B, POOL_B, PER_CLASS = 256, 1024, 512, 8, 2, 256, 512, 16
else:
    N_LAB, N_UNLAB, N_TEST, B, MU, EVAL_B, POOL_B, PER_CLASS = 4000, 50000, 10000, 64, 7, 1000, 2500, 400
N_CLASSES, THRESH, T, LAMBDA_U, TOTAL_STEPS = 10, 0.95, 1.0, 1.0, 2**20
MEAN = torch.tensor([0.4914, 0.4822, 0.4465], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.2471, 0.2435, 0.2616], device=device).view(1, 3, 1, 1)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, activate_before_residual=False):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, momentum=0.001)
        self.relu1 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, momentum=0.001)
        self.relu2 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.equal = cin == cout
        self.shortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)
        self.activate_before_residual = activate_before_residual

    def forward(self, x):
        if not self.equal and self.activate_before_residual:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equal else x)))
        out = self.conv2(out)
        return torch.add(x if self.equal else self.shortcut(x), out)


class WideResNet(nn.Module):
    def __init__(self, num_classes, depth=28, widen=2):
        super().__init__()
        ch = [16, 16 * widen, 32 * widen, 64 * widen]
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(3, ch[0], 3, 1, 1, bias=False)

        def group(cin, cout, stride, abr):
            return nn.Sequential(
                *[BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1, abr) for i in range(n)]
            )

        self.block1 = group(ch[0], ch[1], 1, True)
        self.block2 = group(ch[1], ch[2], 2, False)
        self.block3 = group(ch[2], ch[3], 2, False)
        self.bn1 = nn.BatchNorm2d(ch[3], momentum=0.001)
        self.relu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.fc = nn.Linear(ch[3], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="leaky_relu")
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.constant_(m.bias, 0.0)

    def forward(self, x):
        out = self.block3(self.block2(self.block1(self.conv1(x))))
        out = F.adaptive_avg_pool2d(self.relu(self.bn1(out)), 1)
        return self.fc(out.flatten(1))


class ModelEMA:
    def __init__(self, model, decay):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
        self.param_keys = [k for k, _ in self.ema.named_parameters()]
        self.buffer_keys = [k for k, _ in self.ema.named_buffers()]
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            msd, esd = model.state_dict(), self.ema.state_dict()
            for k in self.param_keys:
                esd[k].copy_(esd[k] * self.decay + (1.0 - self.decay) * msd[k].detach())
            for k in self.buffer_keys:
                esd[k].copy_(msd[k])


def interleave(x, size):
    s = list(x.shape)
    return x.reshape([-1, size, *s[1:]]).transpose(0, 1).reshape([-1, *s[1:]])


def de_interleave(x, size):
    s = list(x.shape)
    return x.reshape([size, -1, *s[1:]]).transpose(0, 1).reshape([-1, *s[1:]])


def to_float(u8):
    return (u8.float() / 255.0 - MEAN) / STD


def weak(u8):
    n = u8.shape[0]
    x = u8.float() / 255.0
    flip = torch.rand(n, device=device) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    padded = F.pad(x, (4, 4, 4, 4), mode="reflect")
    oy = torch.randint(0, 9, (n,), device=device)
    ox = torch.randint(0, 9, (n,), device=device)
    rows = (oy[:, None] + torch.arange(32, device=device))[:, :, None]
    cols = (ox[:, None] + torch.arange(32, device=device))[:, None, :]
    x = padded.permute(0, 2, 3, 1)[torch.arange(n, device=device)[:, None, None], rows, cols]
    return x.permute(0, 3, 1, 2)


def strong(u8):
    x = weak(u8)
    n = x.shape[0]
    ang = (torch.rand(n, device=device) * 2 - 1) * math.radians(30)
    shear = (torch.rand(n, device=device) * 2 - 1) * 0.3
    theta = torch.zeros(n, 2, 3, device=device)
    theta[:, 0, 0], theta[:, 0, 1] = ang.cos(), -ang.sin() + shear
    theta[:, 1, 0], theta[:, 1, 1] = ang.sin(), ang.cos()
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    bright = 0.05 + torch.rand(n, 1, 1, 1, device=device) * 0.9
    x = (x * (bright * 2)).clamp(0, 1)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    contrast = 0.05 + torch.rand(n, 1, 1, 1, device=device) * 0.9
    x = ((x - mean) * (contrast * 2) + mean).clamp(0, 1)
    thr = torch.rand(n, 1, 1, 1, device=device)
    x = torch.where(x >= thr, 1.0 - x, x)
    bits = torch.randint(4, 9, (n, 1, 1, 1), device=device).float()
    levels = 2.0**bits
    x = torch.floor(x * (levels - 1)) / (levels - 1)
    cy = torch.randint(0, 32, (n, 1, 1, 1), device=device)
    cx = torch.randint(0, 32, (n, 1, 1, 1), device=device)
    ar = torch.arange(32, device=device)
    hole = ((ar.view(1, 1, 32, 1) - cy).abs() < 8) & ((ar.view(1, 1, 1, 32) - cx).abs() < 8)
    x = x.masked_fill(hole, 0.5)
    return x


def norm(x):
    return (x - MEAN) / STD


lab_x = torch.randint(0, 256, (N_LAB, 3, 32, 32), dtype=torch.uint8, device=device)
lab_y = torch.randint(0, N_CLASSES, (N_LAB,), device=device)
unlab_x = torch.randint(0, 256, (N_UNLAB, 3, 32, 32), dtype=torch.uint8, device=device)
test_x = torch.randint(0, 256, (N_TEST, 3, 32, 32), dtype=torch.uint8, device=device)
test_y = torch.randint(0, N_CLASSES, (N_TEST,), device=device)

model = WideResNet(N_CLASSES).to(device)
no_decay = ["bias", "bn"]
groups = [
    {
        "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
        "weight_decay": 5e-4,
    },
    {
        "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
        "weight_decay": 0.0,
    },
]
opt = torch.optim.SGD(groups, lr=0.03, momentum=0.9, nesterov=True)


def cosine(step, warmup=0, cycles=7.0 / 16.0):
    progress = float(step - warmup) / float(max(1, TOTAL_STEPS - warmup))
    return max(0.0, math.cos(math.pi * cycles * progress))


sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine)
ema = ModelEMA(model, 0.999)
print("params", sum(p.numel() for p in model.parameters()))
report("gpu pools wrn-28-2 sgd ema")


def sample_batch():
    li = torch.randint(0, N_LAB, (B,), device=device)
    ui = torch.randint(0, N_UNLAB, (B * MU,), device=device)
    u = unlab_x[ui]
    return norm(weak(lab_x[li])), lab_y[li], norm(weak(u)), norm(strong(u)), ui


def forward_split(x, uw, us):
    inputs = interleave(torch.cat((x, uw, us)), 2 * MU + 1)
    logits = de_interleave(model(inputs), 2 * MU + 1)
    logits_x = logits[:B]
    logits_uw, logits_us = logits[B:].chunk(2)
    return logits_x, logits_uw, logits_us


model.train()
for step in range(3):
    x, y, uw, us, _ = sample_batch()
    logits_x, logits_uw, logits_us = forward_split(x, uw, us)
    lx = F.cross_entropy(logits_x, y, reduction="mean")
    pseudo = torch.softmax(logits_uw.detach() / T, dim=-1)
    max_probs, targets_u = torch.max(pseudo, dim=-1)
    mask = max_probs.ge(THRESH).float()
    lu = (F.cross_entropy(logits_us, targets_u, reduction="none") * mask).mean()
    loss = lx + LAMBDA_U * lu
    loss.backward()
    opt.step()
    sched.step()
    ema.update(model)
    model.zero_grad()
    print(f"fixmatch step {step} loss {loss.item():.4f} mask {mask.mean().item():.3f}")
del logits_x, logits_uw, logits_us, loss, pseudo
report("fixmatch fp32 interleaved 960 images")

selected_label = torch.full((N_UNLAB,), -1, dtype=torch.long, device=device)
for step in range(3):
    x, y, uw, us, ui = sample_batch()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        logits_x, logits_uw, logits_us = forward_split(x, uw, us)
        lx = F.cross_entropy(logits_x, y, reduction="mean")
    counts = torch.bincount(selected_label + 1, minlength=N_CLASSES + 1)
    classwise_acc = counts[1:].float() / counts.max().clamp(min=1)
    pseudo = torch.softmax(logits_uw.detach().float() / T, dim=-1)
    max_probs, targets_u = torch.max(pseudo, dim=-1)
    ratio = classwise_acc[targets_u]
    mask = max_probs.ge(THRESH * (ratio / (2.0 - ratio))).float()
    over = max_probs > THRESH
    selected_label[ui] = torch.where(over, targets_u, selected_label[ui])
    lu = (F.cross_entropy(logits_us.float(), targets_u, reduction="none") * mask).mean()
    loss = lx.float() + LAMBDA_U * lu
    loss.backward()
    opt.step()
    sched.step()
    ema.update(model)
    model.zero_grad()
    print(f"flexmatch step {step} loss {loss.item():.4f} mask {mask.mean().item():.3f}")
del logits_x, logits_uw, logits_us, loss, pseudo
report("flexmatch classwise thresholds bf16 autocast")

correct = torch.zeros((), device=device)
with torch.no_grad():
    for i in range(0, N_TEST, EVAL_B):
        logits = ema.ema(to_float(test_x[i : i + EVAL_B]))
        correct += (logits.argmax(1) == test_y[i : i + EVAL_B]).sum()
print(f"ema test accuracy {(correct / N_TEST).item():.4f}")
report("ema evaluation 10k test images")

conf_all = torch.empty(N_UNLAB, device=device)
pred_all = torch.empty(N_UNLAB, dtype=torch.long, device=device)
with torch.inference_mode():
    for i in range(0, N_UNLAB, POOL_B):
        probs = torch.softmax(ema.ema(to_float(unlab_x[i : i + POOL_B])), dim=-1)
        conf_all[i : i + POOL_B], pred_all[i : i + POOL_B] = probs.max(dim=-1)
    keep = []
    for c in range(N_CLASSES):
        keep.append(conf_all.masked_fill(pred_all != c, -1.0).topk(PER_CLASS).indices)
    keep = torch.cat(keep)
    new_x = unlab_x[keep]
    new_y = pred_all[keep]
print("pseudo-labelled set", tuple(new_x.shape), tuple(new_y.shape))
report("pool pseudo-labelling and per-class topk selection")
