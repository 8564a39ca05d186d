"""DP image classification after De et al. 2022 ("Unlocking High-Accuracy Differentially Private Image
Classification through Scale"), written by hand in PyTorch: a WRN-16-4 (3 groups of 2 pre-activation
basic blocks, widths 64/128/256, 1x1 shortcut convs) with GroupNorm(16) instead of BatchNorm and
weight-standardized 3x3 convolutions (the weight re-standardized in every forward), about 2.7M fp32
parameters; augmentation multiplicity K = 4: every one of the 128 CIFAR-like 32 x 32 images (made on the
device) gets 4 random crops (reflect padding 4, per-image offsets gathered by advanced indexing) and
random flips, the per-sample loss is the mean over its 4 augmentations, and per-sample gradients come
from `vmap(grad(loss), in_dims=(None, 0, 0))` over `functional_call` with inputs (128, 4, 3, 32, 32).
Per-sample clipping to C = 1, the clipped sum by einsum, Gaussian noise (sigma 3.0) on the device,
divide by the batch, SGD (lr 2.0, no momentum, as the paper) and an EMA of the parameters (decay
0.999). The first step its own phase, then 3 steps; evaluation of the EMA model on 4 batches of 2,048
under torch.inference_mode with bf16 autocast; then torchvision's resnet18 (num_classes 100,
norm_layer GroupNorm(32)) at 64 x 64 trained with the same vmap(grad) DP-SGD under bf16 autocast, batch
64, K = 1, SGD nesterov momentum 0.9, 2 steps; 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18204)
if SMALL:
    B, K, EVAL_B, RB, RRES = 4, 2, 8, 2, 32
else:
    B, K, EVAL_B, RB, RRES = 128, 4, 2048, 64, 64
C = 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"


class WSConv2d(nn.Conv2d):
    def forward(self, x):
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / torch.sqrt(var + 1e-5)
        return F.conv2d(x, w, self.bias, self.stride, self.padding)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.norm1 = nn.GroupNorm(16, cin)
        self.conv1 = WSConv2d(cin, cout, 3, stride, 1)
        self.norm2 = nn.GroupNorm(16, cout)
        self.conv2 = WSConv2d(cout, cout, 3, 1, 1)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        o = F.relu(self.norm1(x))
        y = self.conv1(o)
        y = self.conv2(F.relu(self.norm2(y)))
        return y + (self.shortcut(o) if self.shortcut is not None else x)


class WideResNet(nn.Module):
    def __init__(self, depth=16, width=4, classes=10):
        super().__init__()
        n = (depth - 4) // 6
        widths = [16 * width, 32 * width, 64 * width]
        self.stem = WSConv2d(3, 16, 3, 1, 1)
        layers, cin = [], 16
        for i, w in enumerate(widths):
            for j in range(n):
                layers.append(Block(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.blocks = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(16, cin)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.norm(self.blocks(self.stem(x))))
        return self.fc(x.mean(dim=(2, 3)))


def augment(images, k):
    n, c, h, w = images.shape
    padded = F.pad(images, (4, 4, 4, 4), mode="reflect")
    reps = padded.repeat_interleave(k, dim=0)
    dy = torch.randint(0, 9, (n * k,), device=images.device)
    dx = torch.randint(0, 9, (n * k,), device=images.device)
    rows = (dy[:, None] + torch.arange(h, device=images.device))[:, :, None]
    cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, :]
    idx = torch.arange(n * k, device=images.device)[:, None, None]
    crops = reps.permute(0, 2, 3, 1)[idx, rows, cols].permute(0, 3, 1, 2)
    flip = torch.rand(n * k, 1, 1, 1, device=images.device) < 0.5
    crops = torch.where(flip, crops.flip(3), crops)
    return crops.reshape(n, k, c, h, w)


def make_per_sample_grads(model, autocast=False):
    def loss_fn(params, x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
            logits = functional_call(model, params, (x,))
        return F.cross_entropy(logits.float(), y.expand(x.shape[0]))

    return vmap(grad(loss_fn), in_dims=(None, 0, 0))


def dp_sgd_step(model, optimizer, psg, x, y, sigma):
    params = {k: v.detach() for k, v in model.named_parameters()}
    grads = psg(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)
    factors = (C / (norms + 1e-6)).clamp(max=1.0)
    for name, p in model.named_parameters():
        summed = torch.einsum("n,n...->...", factors, grads[name])
        p.grad = (summed + sigma * C * torch.randn_like(summed)) / x.shape[0]
    del grads
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norms


model = WideResNet().to(device)
ema = copy.deepcopy(model).eval()
for p in ema.parameters():
    p.requires_grad_(False)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.SGD(model.parameters(), lr=2.0)
psg = make_per_sample_grads(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    images = torch.randn(B, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (B,), device=device)
    x = augment(images, K)
    norms = dp_sgd_step(model, optimizer, psg, x, labels, sigma=3.0)
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - 0.999)
    print(f"step {step} mean norm {norms.mean().item():.3f} clipped {(norms > C).float().mean().item():.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, labels, x, norms
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(4):
        images = torch.randn(EVAL_B, 3, 32, 32, device=device)
        labels = torch.randint(0, 10, (EVAL_B,), device=device)
        correct += (ema(images).argmax(1) == labels).sum().item()
print(f"ema acc {correct / (4 * EVAL_B):.4f}")
del images, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, ema, optimizer, psg
resnet = torchvision.models.resnet18(num_classes=100, norm_layer=lambda c: nn.GroupNorm(32, c)).to(device)
r_opt = torch.optim.SGD(resnet.parameters(), lr=0.5, momentum=0.9, nesterov=True)
r_psg = make_per_sample_grads(resnet, autocast=True)
resnet.train()
for step in range(2):
    images = torch.randn(RB, 3, RRES, RRES, device=device)
    labels = torch.randint(0, 100, (RB,), device=device)
    norms = dp_sgd_step(resnet, r_opt, r_psg, images.unsqueeze(1), labels, sigma=1.5)
    print(f"resnet step {step} mean norm {norms.mean().item():.3f}")
if device == "cuda":
    print(
        f"resnet allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
