"""A CIFAR-10-shaped convnet in the style of hlb-CIFAR10 / airbench with ZCA whitening twice: (1) a frozen
first convolution whose 27 -> 54 filters are the ZCA whitening of 3 x 3 patches, made as hlb-CIFAR10's
`init_whitening_conv` does but by SVD: 5,000 seeded images unfolded into 3 x 3 patches, their
float64 covariance, torch.linalg.svd, filters U diag(1/sqrt(S + eps)) U^T and their negatives;
(2) Decorrelated Batch Normalization (Huang et al. 2018) after every later convolution: per
32-channel group the batch covariance of the centred activations, a batched torch.linalg.svd (fp32,
autocast disabled inside the layer) and the ZCA matrix U diag(S^-1/2) U^T applied by matmul, the
gradient through the SVD; running mean and whitening matrix for eval. Widths 64 / 256 / 256 with a
max-pool after each, a 10-way head scaled by 1/9; bf16 autocast around the convolutions,
channels_last, SGD Nesterov (momentum 0.9, lr 0.2, weight decay 5e-4 on weights), label smoothing
0.2, batch 1,024 of seeded random images with random flips; 6 steps, the first its own phase; an
eval of 4,096 images, then a flip test-time-augmentation eval. Phases: whitening init, step 0, steps
1-5, eval, flip TTA eval; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17203)
if SMALL:
    WIDTHS, GROUP, B, STEPS, INIT_N, EVAL_N, HW = (16, 32, 32), 16, 16, 3, 64, 32, 16
else:
    WIDTHS, GROUP, B, STEPS, INIT_N, EVAL_N, HW = (64, 256, 256), 32, 1024, 6, 5000, 4096, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(17203)


class DecorrelatedBN(nn.Module):
    def __init__(self, channels, group=GROUP, eps=1e-3, momentum=0.1):
        super().__init__()
        self.g, self.eps, self.momentum = channels // group, eps, momentum
        self.gs = group
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(self.g, group, 1))
        self.register_buffer("running_wm", torch.eye(group).expand(self.g, group, group).clone())

    def forward(self, x):
        n, c, h, w = x.shape
        with torch.autocast(x.device.type, enabled=False):
            xf = x.float().permute(1, 0, 2, 3).reshape(self.g, self.gs, -1)
            if self.training:
                mean = xf.mean(-1, keepdim=True)
                xc = xf - mean
                m = xc.size(-1)
                cov = xc @ xc.mT / m + self.eps * torch.eye(self.gs, device=x.device)
                u, s, _ = torch.linalg.svd(cov)
                wm = u @ torch.diag_embed(s.rsqrt()) @ u.mT
                with torch.no_grad():
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_wm.lerp_(wm, self.momentum)
            else:
                xc = xf - self.running_mean
                wm = self.running_wm
            out = (wm @ xc).reshape(c, n, h, w).permute(1, 0, 2, 3)
            out = out * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return out.contiguous(memory_format=torch.channels_last)


class ConvGroup(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = DecorrelatedBN(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = DecorrelatedBN(cout)

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.gelu(self.norm1(x))
        return F.gelu(self.norm2(self.conv2(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.whiten = nn.Conv2d(3, 54, 3, padding=0, bias=True)
        self.layers = nn.Sequential(
            ConvGroup(54, WIDTHS[0]), ConvGroup(WIDTHS[0], WIDTHS[1]), ConvGroup(WIDTHS[1], WIDTHS[2])
        )
        self.head = nn.Linear(WIDTHS[2], 10, bias=False)

    def forward(self, x):
        x = F.gelu(self.whiten(x))
        x = self.layers(x)
        x = F.adaptive_max_pool2d(x, 1).flatten(1)
        return self.head(x.float()) / 9


def images(n):
    return torch.randn(n, 3, HW, HW, generator=gen).to(device).contiguous(memory_format=torch.channels_last)


model = Net().to(device).to(memory_format=torch.channels_last)
model.whiten.weight.requires_grad_(False)
model.whiten.bias.requires_grad_(False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# hlb-CIFAR10's whitening initialisation, by SVD of the float64 patch covariance
with torch.no_grad():
    imgs = images(INIT_N)
    patches = imgs.unfold(2, 3, 1).unfold(3, 3, 1).transpose(1, 3).reshape(-1, 3 * 3 * 3).double()
    patches = patches - patches.mean(0, keepdim=True)
    cov = patches.T @ patches / patches.size(0)
    u, s, _ = torch.linalg.svd(cov)
    zca = (u @ torch.diag((s + 1e-2).rsqrt()) @ u.T).float()  # (27, 27)
    filters = zca.reshape(27, 3, 3, 3)
    model.whiten.weight.copy_(torch.cat([filters, -filters]))
    model.whiten.bias.zero_()
    del imgs, patches
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1]
no_decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim <= 1]
opt = torch.optim.SGD(
    [dict(params=decay, weight_decay=5e-4), dict(params=no_decay, weight_decay=0.0)],
    lr=0.2,
    momentum=0.9,
    nesterov=True,
)
model.train()
for step in range(STEPS):
    x = images(B)
    flip = torch.rand(B, generator=gen).to(device) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    y = torch.randint(0, 10, (B,), generator=gen).to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits, y, label_smoothing=0.2)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for _i in range(0, EVAL_N, B):
        x = images(B)
        y = torch.randint(0, 10, (B,), generator=gen).to(device)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval acc {correct / EVAL_N:.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

correct = 0
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for _i in range(0, EVAL_N, B):
        x = images(B)
        y = torch.randint(0, 10, (B,), generator=gen).to(device)
        logits = model(x) + model(x.flip(-1))
        correct += (logits.argmax(1) == y).sum().item()
print(f"tta acc {correct / EVAL_N:.4f}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
