"""ASAM (adaptive sharpness-aware minimisation, written after SamsungLabs/ASAM: the ascent step
scales each weight's gradient by |w| + eta, takes the global norm of the per-parameter norms, keeps
the perturbation in the optimizer's own state tensor and adds it; the descent step subtracts it
before the base step) around a Lookahead (k=2, alpha 0.5, slow weights kept per parameter and
updated by `slow += (fast - slow) * alpha`) of SGD (Nesterov 0.9, weight decay 5e-4, MultiStepLR),
on a Wide-ResNet-28-10 written by hand (pre-activation basic blocks of 160, 320, 640 channels,
dropout 0.3) for CIFAR-100 sized inputs, channels-last, bf16 autocast, batch 128; the second
forward-backward runs with the batch norms' momentum set to 0 (davda54/sam's
disable_running_stats); 4 steps, then a flip-averaged evaluation at batch 1,000 under no_grad; 6
phases."""

import os
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13203)
B, WIDEN, N_EVAL = (8, 1, 16) if SMALL else (128, 10, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.drop = nn.Dropout(0.3)
        self.short = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = self.conv2(self.drop(F.relu(self.bn2(y))))
        return y + (x if self.short is None else self.short(o))


class WideResNet(nn.Module):
    def __init__(self, depth=28, k=10, classes=100):
        super().__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * k, 32 * k, 64 * k]
        self.conv = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        layers, cin = [], widths[0]
        for i, w in enumerate(widths[1:]):
            for j in range(n):
                layers.append(Block(cin, w, (1 if i == 0 else 2) if j == 0 else 1))
                cin = w
        self.blocks = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn(self.blocks(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Lookahead:
    def __init__(self, optimizer, alpha=0.5, k=2):
        self.optimizer, self.alpha, self.k = optimizer, alpha, k
        self.param_groups = optimizer.param_groups
        self.state = defaultdict(dict)
        for group in self.param_groups:
            group["counter"] = 0

    def update(self, group):
        for fast in group["params"]:
            st = self.state[fast]
            if "slow_param" not in st:
                st["slow_param"] = torch.zeros_like(fast.data)
                st["slow_param"].copy_(fast.data)
            slow = st["slow_param"]
            slow += (fast.data - slow) * self.alpha
            fast.data.copy_(slow)

    def step(self):
        self.optimizer.step()
        for group in self.param_groups:
            if group["counter"] == 0:
                self.update(group)
            group["counter"] += 1
            if group["counter"] >= self.k:
                group["counter"] = 0

    def zero_grad(self):
        self.optimizer.zero_grad()


class ASAM:
    def __init__(self, optimizer, model, rho=0.5, eta=0.01):
        self.optimizer, self.model, self.rho, self.eta = optimizer, model, rho, eta
        self.state = defaultdict(dict)

    @torch.no_grad()
    def ascent_step(self):
        wgrads = []
        for n, p in self.model.named_parameters():
            if p.grad is None:
                continue
            t_w = self.state[p].get("eps")
            if t_w is None:
                t_w = torch.clone(p).detach()
                self.state[p]["eps"] = t_w
            if "weight" in n:
                t_w[...] = p[...]
                t_w.abs_().add_(self.eta)
                p.grad.mul_(t_w)
            wgrads.append(torch.norm(p.grad, p=2))
        wgrad_norm = torch.norm(torch.stack(wgrads), p=2) + 1.0e-16
        for n, p in self.model.named_parameters():
            if p.grad is None:
                continue
            t_w = self.state[p].get("eps")
            if "weight" in n:
                p.grad.mul_(t_w)
            eps = t_w
            eps[...] = p.grad[...]
            eps.mul_(self.rho / wgrad_norm)
            p.add_(eps)
        self.optimizer.zero_grad()

    @torch.no_grad()
    def descent_step(self):
        for _, p in self.model.named_parameters():
            if p.grad is None:
                continue
            p.sub_(self.state[p]["eps"])
        self.optimizer.step()
        self.optimizer.zero_grad()


def disable_running_stats(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.backup_momentum = m.momentum
            m.momentum = 0


def enable_running_stats(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d) and hasattr(m, "backup_momentum"):
            m.momentum = m.backup_momentum


model = WideResNet(k=WIDEN).to(device, memory_format=torch.channels_last)
base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.MultiStepLR(base, milestones=[60, 120, 160], gamma=0.2)
minimizer = ASAM(Lookahead(base, alpha=0.5, k=2), model, rho=1.0, eta=0.01)
mean = torch.tensor([0.507, 0.487, 0.441], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.267, 0.256, 0.276], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    x = ((torch.rand(B, 3, 32, 32, device=device) - mean) / std).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (B,), device=device)
    enable_running_stats(model)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    minimizer.ascent_step()
    disable_running_stats(model)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        F.cross_entropy(model(x), y, label_smoothing=0.1).backward()
    minimizer.descent_step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x = ((torch.rand(N_EVAL, 3, 32, 32, device=device) - mean) / std).contiguous(
        memory_format=torch.channels_last
    )
    y = torch.randint(0, 100, (N_EVAL,), device=device)
    logits = model(x).float().softmax(-1) + model(x.flip(3)).float().softmax(-1)
    correct = (logits.argmax(-1) == y).sum()
if device == "cuda":
    print(
        f"eval correct {correct.item()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
