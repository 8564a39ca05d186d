"""PGD adversarial training after Madry et al. 2018 ("Towards Deep Learning Models Resistant to
Adversarial Attacks") with the WideResNet-28-10 of the yaodongyu/TRADES repository's
models/wideresnet.py written by hand (pre-activation BasicBlocks with in-place ReLUs, a 1 x 1
convShortcut where the width changes, widths 160/320/640, 36.5 M parameters) behind a CIFAR-10
mean/std normalization layer; random CIFAR-shaped batches of 128 (3 x 32 x 32 in [0, 1]). Each
training step generates the adversarial examples by L-inf PGD-10 (eps 8/255, step 2/255, a uniform
random start) with the model switched to eval() for the attack and back to train() for the update:
the perturbation requires grad and `torch.autograd.grad(loss, [delta])` takes the input gradient
alone (no parameter gradients). fp32, SGD (lr 0.1, momentum 0.9, nesterov, weight decay 5e-4),
MultiStepLR; the first step its own phase, then 2 steps; then clean evaluation of 2 batches of 512
under no_grad; PGD-20 evaluation of a batch of 256 in eval mode; FGSM evaluation as many users write
it, `x.requires_grad_()` and `loss.backward()` (which fills the parameters' .grad too), 2 batches of
256; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17501)
if SMALL:
    DEPTH, WIDEN, B, EVAL_B, PGD_B, FGSM_B = 10, 1, 4, 8, 4, 4
else:
    DEPTH, WIDEN, B, EVAL_B, PGD_B, FGSM_B = 28, 10, 128, 512, 256, 256
EPS, ALPHA = 8 / 255, 2 / 255
device = "cuda" if torch.cuda.is_available() else "cpu"


class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, dropRate=0.0):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.droprate = dropRate
        self.equalInOut = in_planes == out_planes
        self.convShortcut = (
            (not self.equalInOut)
            and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, padding=0, bias=False)
        ) or None

    def forward(self, x):
        if not self.equalInOut:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, dropRate=0.0):
        super().__init__()
        self.layer = nn.Sequential(
            *[
                block((i == 0 and in_planes) or out_planes, out_planes, (i == 0 and stride) or 1, dropRate)
                for i in range(int(nb_layers))
            ]
        )

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    def __init__(self, depth=34, num_classes=10, widen_factor=10, dropRate=0.0):
        super().__init__()
        nChannels = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        assert (depth - 4) % 6 == 0
        n = (depth - 4) / 6
        self.register_buffer("mu", torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1))
        self.register_buffer("sigma", torch.tensor([0.2471, 0.2435, 0.2616]).view(1, 3, 1, 1))
        self.conv1 = nn.Conv2d(3, nChannels[0], kernel_size=3, stride=1, padding=1, bias=False)
        self.block1 = NetworkBlock(n, nChannels[0], nChannels[1], BasicBlock, 1, dropRate)
        self.block2 = NetworkBlock(n, nChannels[1], nChannels[2], BasicBlock, 2, dropRate)
        self.block3 = NetworkBlock(n, nChannels[2], nChannels[3], BasicBlock, 2, dropRate)
        self.bn1 = nn.BatchNorm2d(nChannels[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(nChannels[3], num_classes)
        self.nChannels = nChannels[3]
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x):
        out = self.conv1((x - self.mu) / self.sigma)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, 8)
        out = out.view(-1, self.nChannels)
        return self.fc(out)


def cifar_batch(bs):
    x = torch.rand(bs, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (bs,), device=device)
    return x, y


def pgd_attack(model, x, y, eps, alpha, steps):
    was_training = model.training
    model.eval()
    delta = torch.empty_like(x).uniform_(-eps, eps)
    delta = torch.clamp(x + delta, 0, 1) - x
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = F.cross_entropy(model(x + delta), y)
        (grad,) = torch.autograd.grad(loss, [delta])
        delta = delta.detach() + alpha * grad.sign()
        delta = torch.clamp(delta, -eps, eps)
        delta = torch.clamp(x + delta, 0, 1) - x
    model.train(was_training)
    return (x + delta).detach()


model = WideResNet(depth=DEPTH, num_classes=10, widen_factor=WIDEN).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[100, 150], gamma=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x, y = cifar_batch(B)
    x_adv = pgd_attack(model, x, y, EPS, ALPHA, 10)
    logits = model(x_adv)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    acc = (logits.argmax(1) == y).float().mean()
    print(f"step {step} adv loss {loss.item():.4f} adv acc {acc.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, x_adv, logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x, y = cifar_batch(EVAL_B)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"clean acc {correct / (2 * EVAL_B):.3f}")
if device == "cuda":
    print(f"clean peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

x, y = cifar_batch(PGD_B)
x_adv = pgd_attack(model, x, y, EPS, 0.003, 20)  # TRADES pgd_whitebox: step 0.003
with torch.no_grad():
    robust = (model(x_adv).argmax(1) == y).float().mean()
print(f"pgd20 acc {robust.item():.3f}")
del x, y, x_adv
if device == "cuda":
    print(f"pgd peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

fgsm_correct = 0
for _ in range(2):
    x, y = cifar_batch(FGSM_B)
    x.requires_grad_()
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    x_adv = torch.clamp(x + EPS * x.grad.sign(), 0, 1).detach()
    with torch.no_grad():
        fgsm_correct += (model(x_adv).argmax(1) == y).sum().item()
print(f"fgsm acc {fgsm_correct / (2 * FGSM_B):.3f}")
if device == "cuda":
    print(
        f"fgsm allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
