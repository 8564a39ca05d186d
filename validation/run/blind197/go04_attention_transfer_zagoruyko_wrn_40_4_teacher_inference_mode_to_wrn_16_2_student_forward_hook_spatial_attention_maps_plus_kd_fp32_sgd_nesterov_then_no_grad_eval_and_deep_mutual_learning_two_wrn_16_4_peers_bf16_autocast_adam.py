"""Attention transfer (Zagoruyko & Komodakis 2017, "Paying more attention to attention") from a Wide-ResNet
teacher to a thinner student on CIFAR-100-shaped batches, then deep mutual learning (Zhang et al. 2018).

Wide-ResNets written by hand as in szagoruyko/attention-transfer (pre-activation BasicBlocks with
BatchNorm/ReLU before each 3 x 3 conv, 1 x 1 shortcut convs where the width changes, three groups at
32, 16, 8 px). Teacher WRN-40-4 (8.9 M parameters), eval mode, run under torch.inference_mode; its
logits are cloned outside inference mode for the KD term. Student WRN-16-2. Forward hooks on each
group's last block collect the three group outputs of both networks; the attention map of a feature is
F.normalize(f.pow(2).mean(1).flatten(1)); the loss is CE + KD (T = 4, alpha 0.9, KL of softened logits)
+ beta/2 * sum over groups of mean((at_s - at_t)^2), beta = 1,000. Batch 1,024 x 3 x 32 x 32 made on the
host (pinned, non_blocking copy), random crop by padding 4 and flip done on the device. fp32, SGD
momentum 0.9 nesterov, weight decay 5e-4, lr 0.1.

Phases: the first step; 3 more steps; no_grad evaluation of 10,000 test images in batches of 2,500
(student and teacher top-1 agreement); then deep mutual learning of two WRN-16-4 peers from scratch
under bf16 autocast (each peer's loss is CE + KL to the other's detached softmax), one Adam optimizer
per peer, 3 steps at batch 1,024. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19704)
if SMALL:
    B, EVAL_B, EVAL_TOTAL, STEPS = 16, 25, 50, 1
else:
    B, EVAL_B, EVAL_TOTAL, STEPS = 1024, 2500, 10000, 3
NUM_CLASSES = 100
T, ALPHA, BETA = 4.0, 0.9, 1000.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn0 = nn.BatchNorm2d(cin)
        self.conv0 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.short = nn.Conv2d(cin, cout, 1, stride, bias=False) if (cin != cout or stride != 1) else None

    def forward(self, x):
        o = F.relu(self.bn0(x))
        y = self.conv0(o)
        y = self.conv1(F.relu(self.bn1(y)))
        return y + (self.short(o) if self.short is not None else x)


class WRN(nn.Module):
    def __init__(self, depth, width, num_classes=NUM_CLASSES):
        super().__init__()
        n = (depth - 4) // 6
        widths = [16 * width, 32 * width, 64 * width]
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        groups, cin = [], 16
        for i, w in enumerate(widths):
            groups.append(
                nn.Sequential(
                    *[Block(cin if j == 0 else w, w, (1 if i == 0 else 2) if j == 0 else 1) for j in range(n)]
                )
            )
            cin = w
        self.groups = nn.ModuleList(groups)
        self.bn = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.conv(x)
        for g in self.groups:
            x = g(x)
        x = F.relu(self.bn(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def hook_groups(model, store):
    for i, g in enumerate(model.groups):
        g[-1].register_forward_hook(lambda m, inp, out, i=i: store.__setitem__(i, out))


def at(f):
    return F.normalize(f.pow(2).mean(1).flatten(1))


def augment(x):
    x = F.pad(x, (4, 4, 4, 4), mode="reflect")
    i, j = torch.randint(0, 9, (2,)).tolist()
    x = x[:, :, i : i + 32, j : j + 32]
    flip = torch.rand(x.shape[0], device=x.device) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(3), x)


def host_batch(n):
    x = torch.randn(n, 3, 32, 32)
    y = torch.randint(0, NUM_CLASSES, (n,))
    if device == "cuda":
        x, y = x.pin_memory(), y.pin_memory()
    return augment(x.to(device, non_blocking=True)), y.to(device, non_blocking=True)


teacher = WRN(40, 4).to(device).eval()
student = WRN(16, 2).to(device).train()
t_feats, s_feats = {}, {}
hook_groups(teacher, t_feats)
hook_groups(student, s_feats)
opt = torch.optim.SGD(student.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
print(
    f"teacher params {sum(p.numel() for p in teacher.parameters())} "
    f"student params {sum(p.numel() for p in student.parameters())}"
)


def at_step():
    x, y = host_batch(B)
    with torch.inference_mode():
        t_logits = teacher(x)
        t_maps = [at(t_feats[i]) for i in range(3)]
    t_logits, t_maps = t_logits.clone(), [m.clone() for m in t_maps]
    s_logits = student(x)
    kd = F.kl_div(F.log_softmax(s_logits / T, 1), F.softmax(t_logits / T, 1), reduction="batchmean") * T * T
    loss = (1 - ALPHA) * F.cross_entropy(s_logits, y) + ALPHA * kd
    loss = loss + BETA / 2 * sum((at(s_feats[i]) - t_maps[i]).pow(2).mean() for i in range(3))
    opt.zero_grad()
    loss.backward()
    opt.step()
    s_feats.clear()
    t_feats.clear()
    return loss.item()


print(f"step 0 loss {at_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = at_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.eval()
test_x = torch.randn(EVAL_TOTAL, 3, 32, 32, device=device)
agree = 0
with torch.no_grad():
    for i in range(0, EVAL_TOTAL, EVAL_B):
        xb = test_x[i : i + EVAL_B]
        agree += (student(xb).argmax(1) == teacher(xb).argmax(1)).sum().item()
s_feats.clear()
t_feats.clear()
print(f"eval student/teacher agreement {agree / EVAL_TOTAL:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del test_x
opt = None
peers = [WRN(16, 4).to(device).train() for _ in range(2)]
peer_opts = [torch.optim.Adam(p.parameters(), lr=1e-3) for p in peers]
for step in range(3):
    x, y = host_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = [p(x) for p in peers]
    losses = []
    for k in range(2):
        other = F.softmax(logits[1 - k].detach().float(), 1)
        kl = F.kl_div(F.log_softmax(logits[k].float(), 1), other, reduction="batchmean")
        losses.append(F.cross_entropy(logits[k].float(), y) + kl)
    for o in peer_opts:
        o.zero_grad(set_to_none=True)
    sum(losses).backward()
    for o in peer_opts:
        o.step()
    print(f"dml step {step} losses {losses[0].item():.4f} {losses[1].item():.4f}")
if device == "cuda":
    print(
        f"dml allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
