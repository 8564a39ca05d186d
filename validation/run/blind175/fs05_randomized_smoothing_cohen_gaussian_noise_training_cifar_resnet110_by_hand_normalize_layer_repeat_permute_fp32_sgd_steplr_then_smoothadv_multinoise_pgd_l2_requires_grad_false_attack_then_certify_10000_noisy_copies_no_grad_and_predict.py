"""Randomized smoothing after Cohen et al. 2019 ("Certified Adversarial Robustness via Randomized
Smoothing") and the locuslab/smoothing repository: the CIFAR ResNet-110 of its archs/cifar_resnet.py
written by hand (BasicBlocks of 16/32/64 channels, 18 per stage, in-place ReLUs and `out +=
residual`, 1 x 1 conv + BN downsamples, AvgPool2d(8); 1.7 M parameters) behind its NormalizeLayer
(means and sds `repeat`ed to (batch, H, W, 3) and permuted, on every call), random CIFAR-shaped
batches. Training with Gaussian noise augmentation (sigma 0.25, `torch.randn_like`), fp32, SGD (lr
0.1, momentum 0.9, weight decay 1e-4), StepLR, batch 256; the first step its own phase, then 2 steps.
Then SmoothAdv (Salman et al. 2019, Hadisalman/smoothing-adversarial's train_pgd.py and PGD_L2's
_attack_mutlinoise, without its zero-gradient-norm branch): the batch split into minibatches of 64
each repeated for m = 4 noise vectors, `requires_grad_(model, False)` and eval() for the attack, 2 L2
PGD steps (eps 0.25) on the noise-averaged softmax with an SGD optimizer over delta, grad renorm,
`delta.data.add_/clamp_/sub_/renorm_`, then train() with grads back on, 2 minibatches. Then the
repository's Smooth.certify for 4 test images (N0 = 100 selection samples, N = 10,000 estimation
samples in batches of 1,000: `x.repeat((1000, 1, 1, 1))` plus scaled `randn_like` noise, argmax,
counts on the host) under no_grad, a Wilson-score lower bound in place of statsmodels' Clopper-Pearson
and the stdlib's NormalDist for the radius; then Smooth.predict for 4 images with n = 2,000 and a
binomial test on the host; 6 phases."""

import math
import os
from statistics import NormalDist

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17505)
if SMALL:
    DEPTH, B, M, ADV_MB, N0, N, BATCH, N_PRED, IMAGES = 8, 8, 2, 2, 4, 16, 8, 8, 2
else:
    DEPTH, B, M, ADV_MB, N0, N, BATCH, N_PRED, IMAGES = 110, 256, 4, 2, 100, 10000, 1000, 2000, 4
SIGMA = 0.25
device = "cuda" if torch.cuda.is_available() else "cpu"
_CIFAR10_MEAN = [0.4914, 0.4822, 0.4465]
_CIFAR10_STDDEV = [0.2023, 0.1994, 0.2010]


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, depth, num_classes=1000):
        super().__init__()
        assert (depth - 2) % 6 == 0
        n = (depth - 2) // 6
        block = BasicBlock
        self.inplanes = 16
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, 16, n)
        self.layer2 = self._make_layer(block, 32, n, stride=2)
        self.layer3 = self._make_layer(block, 64, n, stride=2)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n_ = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / n_))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        return self.fc(x)


class NormalizeLayer(nn.Module):
    def __init__(self, means, sds):
        super().__init__()
        self.means = torch.tensor(means).to(device)
        self.sds = torch.tensor(sds).to(device)

    def forward(self, input):
        (batch_size, _num_channels, height, width) = input.shape
        means = self.means.repeat((batch_size, height, width, 1)).permute(0, 3, 1, 2)
        sds = self.sds.repeat((batch_size, height, width, 1)).permute(0, 3, 1, 2)
        return (input - means) / sds


def requires_grad_(model, requires_grad):
    for param in model.parameters():
        param.requires_grad_(requires_grad)


def cifar_batch(bs):
    return torch.rand(bs, 3, 32, 32, device=device), torch.randint(0, 10, (bs,), device=device)


model = nn.Sequential(NormalizeLayer(_CIFAR10_MEAN, _CIFAR10_STDDEV), ResNet(depth=DEPTH, num_classes=10)).to(
    device
)
print(f"params {sum(p.numel() for p in model.parameters())}")
criterion = nn.CrossEntropyLoss().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for i in range(3):
    inputs, targets = cifar_batch(B)
    inputs = inputs + torch.randn_like(inputs, device=device) * SIGMA
    outputs = model(inputs)
    loss = criterion(outputs, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"noise step {i} loss {loss.item():.4f}")
    if i == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
scheduler.step()
del inputs, targets, outputs, loss
if device == "cuda":
    print(f"noise peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class PGD_L2:
    def __init__(self, steps, max_norm):
        self.steps = steps
        self.max_norm = max_norm

    def attack(self, model, inputs, labels, noise=None, num_noise_vectors=1, targeted=False):
        batch_size = labels.shape[0]
        multiplier = 1 if targeted else -1
        delta = torch.zeros((len(labels), *inputs.shape[1:]), requires_grad=True, device=inputs.device)
        optimizer = torch.optim.SGD([delta], lr=self.max_norm / self.steps * 2)
        for _ in range(self.steps):
            adv = inputs + delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)
            if noise is not None:
                adv = adv + noise
            logits = model(adv)
            softmax = F.softmax(logits, dim=1)
            average_softmax = (
                softmax.reshape(-1, num_noise_vectors, logits.shape[-1]).mean(1, keepdim=True).squeeze(1)
            )
            logsoftmax = torch.log(average_softmax.clamp(min=1e-20))
            ce_loss = F.nll_loss(logsoftmax, labels)
            loss = multiplier * ce_loss
            optimizer.zero_grad()
            loss.backward()
            grad_norms = delta.grad.view(batch_size, -1).norm(p=2, dim=1)
            delta.grad.div_(grad_norms.view(-1, 1, 1, 1))
            optimizer.step()
            delta.data.add_(inputs[::num_noise_vectors])
            delta.data.clamp_(0, 1).sub_(inputs[::num_noise_vectors])
            delta.data.renorm_(p=2, dim=0, maxnorm=self.max_norm)
        return inputs + delta.repeat(1, num_noise_vectors, 1, 1).view_as(inputs)


attacker = PGD_L2(steps=2, max_norm=0.25)
for i in range(ADV_MB):
    batch = cifar_batch(B // M)
    inputs, targets = batch
    inputs = inputs.repeat((1, M, 1, 1)).view(B, 3, 32, 32)
    noise = torch.randn_like(inputs, device=device) * SIGMA
    requires_grad_(model, False)
    model.eval()
    inputs = attacker.attack(model, inputs, targets, noise=noise, num_noise_vectors=M)
    model.train()
    requires_grad_(model, True)
    noisy_inputs = inputs + noise
    targets = targets.unsqueeze(1).repeat(1, M).reshape(-1, 1).squeeze()
    outputs = model(noisy_inputs)
    loss = criterion(outputs, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"smoothadv minibatch {i} loss {loss.item():.4f}")
del batch, inputs, targets, noise, noisy_inputs, outputs, loss
if device == "cuda":
    print(f"smoothadv peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Smooth:
    ABSTAIN = -1

    def __init__(self, base_classifier, num_classes, sigma):
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.sigma = sigma

    def certify(self, x, n0, n, alpha, batch_size):
        self.base_classifier.eval()
        counts_selection = self._sample_noise(x, n0, batch_size)
        cAHat = counts_selection.argmax().item()
        counts_estimation = self._sample_noise(x, n, batch_size)
        nA = counts_estimation[cAHat].item()
        pABar = self._lower_confidence_bound(nA, n, alpha)
        if pABar < 0.5:
            return Smooth.ABSTAIN, 0.0
        return cAHat, self.sigma * NormalDist().inv_cdf(pABar)

    def predict(self, x, n, alpha, batch_size):
        self.base_classifier.eval()
        counts = self._sample_noise(x, n, batch_size)
        top2 = counts.argsort()[::-1][:2]
        count1, count2 = int(counts[top2[0]]), int(counts[top2[1]])
        if self._binom_test(count1, count1 + count2) > alpha:
            return Smooth.ABSTAIN
        return int(top2[0])

    def _sample_noise(self, x, num, batch_size):
        with torch.no_grad():
            counts = np.zeros(self.num_classes, dtype=int)
            for _ in range(math.ceil(num / batch_size)):
                this_batch_size = min(batch_size, num)
                num -= this_batch_size
                batch = x.repeat((this_batch_size, 1, 1, 1))
                noise = torch.randn_like(batch, device=device) * self.sigma
                predictions = self.base_classifier(batch + noise).argmax(1)
                counts += self._count_arr(predictions.cpu().numpy(), self.num_classes)
            return counts

    def _count_arr(self, arr, length):
        counts = np.zeros(length, dtype=int)
        for idx in arr:
            counts[idx] += 1
        return counts

    def _lower_confidence_bound(self, NA, N, alpha):
        z = NormalDist().inv_cdf(1 - alpha)
        p = NA / N
        centre = p + z * z / (2 * N)
        spread = z * math.sqrt(p * (1 - p) / N + z * z / (4 * N * N))
        return (centre - spread) / (1 + z * z / N)

    def _binom_test(self, k, n):
        if n == 0:
            return 1.0
        k = max(k, n - k)
        tail = sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n
        return min(1.0, 2 * tail)


smoothed = Smooth(model, 10, SIGMA)
test_x, test_y = cifar_batch(IMAGES)
for i in range(IMAGES):
    prediction, radius = smoothed.certify(test_x[i], N0, N, 0.001, BATCH)
    print(f"certify {i} label {test_y[i].item()} predict {prediction} radius {radius:.3f}")
if device == "cuda":
    print(f"certify peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(IMAGES):
    print(f"predict {i} {smoothed.predict(test_x[i], N_PRED, 0.001, BATCH)}")
if device == "cuda":
    print(
        f"predict allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
