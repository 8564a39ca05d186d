"""Dynamic networks whose computation depends on the input: dynamic convolution and capsule routing.

Part 1, dynamic convolution (Chen et al. 2020, DyConv): every 3x3 conv of a small ResNet-like net on
random 3 x 64 x 64 images holds K = 4 kernels; a squeeze-excitation-like branch (global pool, two linears,
softmax with temperature 30) gives per-sample attention over the K kernels, the kernels (and biases) are
aggregated per sample by a matmul, and the batch runs as one grouped convolution (the input reshaped to
[1, B * C, H, W], the aggregated weights to [B * C_out, C, 3, 3], groups = B).

Part 2, a capsule network (Sabour et al. 2017) on random 1 x 28 x 28 images: Conv 256 9x9, primary capsules
(Conv 256 9x9 stride 2 -> 1152 capsules of 8 dimensions), digit capsules 10 x 16 by a learned [1152, 10, 16,
8] transform (torch.einsum), 3 iterations of dynamic routing by agreement (the predictions detached in all
but the last iteration), the squash non-linearity as a custom autograd.Function with a hand-written
backward, margin loss plus a masked reconstruction decoder (MSE x 0.0005).

Phases: 3 steps of the DyConv net at batch 64, fp32, SGD momentum; its evaluation under no_grad at batch 256;
3 steps of the capsule network at batch 256, fp32, Adam; then 3 steps at batch 512 under bf16 autocast with
the for-loop (foreach=False) AdamW. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2215)
device = "cuda" if torch.cuda.is_available() else "cpu"
DY_BATCH, DY_EVAL, CAPS_BATCH, CAPS_BF16 = (4, 8, 4, 8) if SMALL else (64, 256, 256, 512)
WIDTHS = (16, 32, 64) if SMALL else (64, 128, 256)
K = 4


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class DynamicConv2d(nn.Module):
    def __init__(self, c_in, c_out, stride=1, temperature=30.0):
        super().__init__()
        self.c_in, self.c_out, self.stride, self.temperature = c_in, c_out, stride, temperature
        self.weight = nn.Parameter(torch.randn(K, c_out, c_in, 3, 3) * (2.0 / (9 * c_in)) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(K, c_out))
        hidden = max(c_in // 4, 4)
        self.fc1 = nn.Linear(c_in, hidden)
        self.fc2 = nn.Linear(hidden, K)

    def forward(self, x):
        b, c, h, w = x.shape
        attn = F.softmax(self.fc2(F.relu(self.fc1(x.mean((2, 3))))) / self.temperature, dim=1)  # [b, K]
        weight = (attn @ self.weight.view(K, -1)).view(b * self.c_out, self.c_in, 3, 3)
        bias = (attn @ self.bias).view(-1)
        out = F.conv2d(x.reshape(1, b * c, h, w), weight, bias, stride=self.stride, padding=1, groups=b)
        return out.view(b, self.c_out, out.shape[-2], out.shape[-1])


class DyBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1, self.bn1 = DynamicConv2d(c_in, c_out, stride), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = DynamicConv2d(c_out, c_out), nn.BatchNorm2d(c_out)
        self.short = (
            nn.Identity()
            if stride == 1 and c_in == c_out
            else nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
        )

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.short(x))


class DyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, WIDTHS[0], 3, padding=1, bias=False), nn.BatchNorm2d(WIDTHS[0]), nn.ReLU()
        )
        blocks, c = [], WIDTHS[0]
        for i, w in enumerate(WIDTHS):
            blocks += [DyBlock(c, w, 1 if i == 0 else 2), DyBlock(w, w, 1)]
            c = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c, 100)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


net = DyNet().to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
for step in range(3):
    x = torch.randn(DY_BATCH, 3, 64, 64, device=device)
    y = torch.randint(0, 100, (DY_BATCH,), device=device)
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"dyconv loss {loss.item():.4f}")
report("dynamic conv grouped trick fp32 sgd")

net.eval()
with torch.no_grad():
    x = torch.randn(DY_EVAL, 3, 64, 64, device=device)
    top5 = net(x).topk(5, dim=1).indices
print(f"dyconv eval top5 of first {top5[0].tolist()}")
report("dynamic conv no_grad eval")
del net, opt, loss, x, top5


class Squash(torch.autograd.Function):
    """v = |s|^2 / (1 + |s|^2) * s / sqrt(|s|^2 + eps) over the last dimension."""

    EPS = 1e-8

    @staticmethod
    def forward(ctx, s):
        n2 = s.square().sum(-1, keepdim=True)
        f = n2 / ((1 + n2) * torch.sqrt(n2 + Squash.EPS))
        ctx.save_for_backward(s, n2, f)
        return f * s

    @staticmethod
    def backward(ctx, g):
        s, n2, f = ctx.saved_tensors
        root = torch.sqrt(n2 + Squash.EPS)
        df = ((1 + n2) * root - n2 * (root + (1 + n2) / (2 * root))) / ((1 + n2).square() * (n2 + Squash.EPS))
        return f * g + 2 * df * (g * s).sum(-1, keepdim=True) * s


class CapsNet(nn.Module):
    def __init__(self, routing_iters=3):
        super().__init__()
        self.iters = routing_iters
        self.conv1 = nn.Conv2d(1, 256, 9)
        self.primary = nn.Conv2d(256, 32 * 8, 9, stride=2)
        self.W = nn.Parameter(0.01 * torch.randn(1152, 10, 16, 8))
        self.decoder = nn.Sequential(
            nn.Linear(160, 512),
            nn.ReLU(),
            nn.Linear(512, 1024),
            nn.ReLU(),
            nn.Linear(1024, 784),
            nn.Sigmoid(),
        )

    def forward(self, x, y):
        b = x.shape[0]
        h = F.relu(self.conv1(x))
        u = self.primary(h).view(b, 32, 8, 6, 6).permute(0, 1, 3, 4, 2).reshape(b, 1152, 8)
        u = Squash.apply(u)
        u_hat = torch.einsum("njoi,bni->bnjo", self.W, u)  # [b, 1152, 10, 16]
        logits = torch.zeros(b, 1152, 10, device=x.device, dtype=u_hat.dtype)
        for r in range(self.iters):
            c = F.softmax(logits, dim=2)
            last = r == self.iters - 1
            uh = u_hat if last else u_hat.detach()
            v = Squash.apply((c.unsqueeze(-1) * uh).sum(1))  # [b, 10, 16]
            if not last:
                logits = logits + (uh * v.unsqueeze(1)).sum(-1)
        lengths = v.norm(dim=-1)
        masked = (v * F.one_hot(y, 10).unsqueeze(-1).to(v.dtype)).flatten(1)
        return lengths, self.decoder(masked)


def capsule_loss(lengths, recon, x, y):
    t = F.one_hot(y, 10).float()
    lengths = lengths.float()
    margin = t * F.relu(0.9 - lengths).square() + 0.5 * (1 - t) * F.relu(lengths - 0.1).square()
    return (
        margin.sum(1).mean() + 0.0005 * F.mse_loss(recon.float(), x.flatten(1), reduction="sum") / x.shape[0]
    )


caps = CapsNet().to(device)
opt = torch.optim.Adam(caps.parameters(), lr=1e-3)
for step in range(3):
    x = torch.rand(CAPS_BATCH, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (CAPS_BATCH,), device=device)
    loss = capsule_loss(*caps(x, y), x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"capsnet loss {loss.item():.4f}")
report("capsnet dynamic routing fp32 adam")

del opt
opt = torch.optim.AdamW(caps.parameters(), lr=1e-3, foreach=False)
for step in range(3):
    x = torch.rand(CAPS_BF16, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (CAPS_BF16,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = capsule_loss(*caps(x, y), x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"capsnet bf16 loss {loss.item():.4f}")
report("capsnet bf16 autocast adamw for-loop")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
