"""Adversarial training of a WideResNet-28-4 on CIFAR-sized inputs (32 x 32, batch 256), fp32 with
cuDNN's TF32, SGD with Nesterov momentum: Madry's PGD-7 (eps 8/255, step 2/255, random start),
each attack step taking the input gradient by torch.autograd.grad(loss, delta, only_inputs=True),
2 steps; then "free" adversarial training (Shafahi et al.) with 4 replays of a batch, one backward
giving the parameters' gradients and delta's .grad together; then a head-only step on adversarial
examples by loss.backward(inputs=list(model.fc.parameters())); then robust accuracy under PGD-10
in eval mode on a batch of 512; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14905)
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True
B, EB, DEPTH, WIDEN = (8, 8, 10, 1) if SMALL else (256, 512, 28, 4)
EPS, ALPHA = 8 / 255, 2 / 255
device = "cuda" if torch.cuda.is_available() else "cpu"
MEAN = torch.tensor([0.4914, 0.4822, 0.4465], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.2471, 0.2435, 0.2616], device=device).view(1, 3, 1, 1)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.equal = cin == cout
        self.shortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = self.conv2(F.relu(self.bn2(y)))
        return y + (x if self.equal else self.shortcut(o))


class WideResNet(nn.Module):
    def __init__(self, depth, widen, num_classes=10):
        super().__init__()
        n = (depth - 4) // 6
        ch = [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(3, ch[0], 3, 1, 1, bias=False)
        layers = []
        for g, stride in zip(range(3), (1, 2, 2), strict=True):
            for i in range(n):
                layers.append(BasicBlock(ch[g] if i == 0 else ch[g + 1], ch[g + 1], stride if i == 0 else 1))
        self.blocks = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(ch[3])
        self.fc = nn.Linear(ch[3], num_classes)

    def features(self, x):
        x = self.blocks(self.conv1((x - MEAN) / STD))
        return F.adaptive_avg_pool2d(F.relu(self.bn(x)), 1).flatten(1)

    def forward(self, x):
        return self.fc(self.features(x))


model = WideResNet(DEPTH, WIDEN).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def data(n):
    return torch.rand(n, 3, 32, 32, device=device), torch.randint(0, 10, (n,), device=device)


def pgd(x, y, steps):
    delta = torch.empty_like(x).uniform_(-EPS, EPS).requires_grad_(True)
    for _ in range(steps):
        loss = F.cross_entropy(model((x + delta).clamp(0, 1)), y)
        (grad,) = torch.autograd.grad(loss, delta, only_inputs=True)
        delta = (delta.detach() + ALPHA * grad.sign()).clamp(-EPS, EPS).requires_grad_(True)
    return (x + delta.detach()).clamp(0, 1)


def report(tag, loss, reset=True):
    if device == "cuda":
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


model.train()
for _ in range(2):
    x, y = data(B)
    x_adv = pgd(x, y, 7)
    loss = F.cross_entropy(model(x_adv), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
report("pgd7", loss)
del x_adv

x, y = data(B)
delta = torch.zeros_like(x, requires_grad=True)
for _ in range(4):
    loss = F.cross_entropy(model((x + delta).clamp(0, 1)), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    delta = (delta.detach() + EPS * delta.grad.sign()).clamp(-EPS, EPS).requires_grad_(True)
report("free-at", loss)
del delta

x, y = data(B)
x_adv = pgd(x, y, 3)
loss = F.cross_entropy(model(x_adv), y)
opt.zero_grad(set_to_none=True)
loss.backward(inputs=list(model.fc.parameters()))
opt.step()
report(f"head only (conv1 grad {model.conv1.weight.grad is None})", loss)
del x_adv

model.eval()
x, y = data(EB)
x_adv = pgd(x, y, 10)
with torch.no_grad():
    robust = (model(x_adv).argmax(-1) == y).float().mean()
report("pgd10 robust acc", robust, reset=False)
