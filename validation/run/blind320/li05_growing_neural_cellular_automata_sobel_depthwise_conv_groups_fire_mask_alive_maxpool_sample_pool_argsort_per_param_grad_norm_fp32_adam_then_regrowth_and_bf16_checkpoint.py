"""Growing Neural Cellular Automata (Mordvintsev et al., Distill 2020) written from the article: a
16-channel cell grid whose update rule is a tiny per-cell network. Perception is a fixed depthwise
convolution (identity, Sobel-x, Sobel-y per channel: ``F.conv2d`` with groups=16 on 48 stacked
filters), the update is two 1x1 convolutions (the last zero-initialised), applied with a random
per-cell fire mask (stochastic updates, rate 0.5) and alive masking (a cell lives if the 3x3 max pool of
the alpha channel exceeds 0.1, before and after). Training follows the "persistent" experiment: a
sample pool of 1024 states, each batch taking 32 of them, the worst (by loss, ``argsort``) replaced
with the seed, 64-96 CA steps unrolled and the gradient of each parameter normalised by its own norm
before Adam. The target is a synthetic 40x40 RGBA emoji-like pattern padded to 56x56.

Phases: 0 pattern, seed, pool and model on the GPU; 1 pool training in float32; 2 damage and
regeneration of a batch (circles cut out, 160 steps under no_grad); 3 rollouts of 128 steps under bf16
autocast with non-reentrant checkpointing of every 16-step segment, backward and an Adam step."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(3)
device = "cuda"

CH, HID, SIZE, PAD, POOL, BATCH, FIRE = 16, 128, 40, 8, 1024, 32, 0.5
W = SIZE + 2 * PAD


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def make_target():
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, SIZE), torch.linspace(-1, 1, SIZE), indexing="ij")
    r = torch.sqrt(xx**2 + yy**2)
    face = (r < 0.9).float()
    eyes = (((xx - 0.35) ** 2 + (yy + 0.3) ** 2) < 0.02).float() + (
        ((xx + 0.35) ** 2 + (yy + 0.3) ** 2) < 0.02
    ).float()
    mouth = ((torch.abs(r - 0.5) < 0.08) & (yy > 0.15)).float()
    rgb = torch.stack([face * 0.98, face * 0.8 * (1 - eyes) * (1 - mouth), face * 0.2 * (1 - eyes)], 0)
    rgba = torch.cat([rgb * face, face[None]], 0)
    return F.pad(rgba, (PAD, PAD, PAD, PAD)).to(device)


class CA(nn.Module):
    def __init__(self):
        super().__init__()
        ident = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
        sobel_x = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8
        kernel = torch.stack([ident, sobel_x, sobel_x.T])  # (3, 3, 3)
        self.register_buffer("kernel", kernel.repeat(CH, 1, 1).unsqueeze(1))  # (48, 1, 3, 3)
        self.w1 = nn.Conv2d(3 * CH, HID, 1)
        self.w2 = nn.Conv2d(HID, CH, 1, bias=False)
        nn.init.zeros_(self.w2.weight)

    def alive(self, x):
        return F.max_pool2d(x[:, 3:4], 3, stride=1, padding=1) > 0.1

    def forward(self, x):
        pre = self.alive(x)
        y = F.conv2d(x, self.kernel.to(x.dtype), padding=1, groups=CH)
        dx = self.w2(F.relu(self.w1(y)))
        fire = (torch.rand(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device) <= FIRE).to(x.dtype)
        x = x + dx * fire
        post = self.alive(x)
        return x * (pre & post).to(x.dtype)


def seed(n):
    s = torch.zeros(n, CH, W, W, device=device)
    s[:, 3:, W // 2, W // 2] = 1.0
    return s


target = make_target()
model = CA().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2000], 0.1)
pool = seed(POOL)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")


def loss_per_sample(x):
    return ((x[:, :4] - target) ** 2).mean(dim=(1, 2, 3))


for it in range(6):
    idx = torch.randperm(POOL, device=device)[:BATCH]
    x = pool[idx]
    with torch.no_grad():
        order = loss_per_sample(x).argsort(descending=True)
    x = x[order]
    x[:1] = seed(1)
    steps = 64 + it * 6
    for _ in range(steps):
        x = model(x)
    loss = loss_per_sample(x).mean()
    opt.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.grad /= p.grad.norm() + 1e-8
    opt.step()
    sched.step()
    pool[idx[order]] = x.detach()
print("pool loss", round(loss.item(), 5))
report("phase1 pool_train")

with torch.no_grad():
    x = pool[:BATCH].clone()
    yy, xx = torch.meshgrid(torch.arange(W, device=device), torch.arange(W, device=device), indexing="ij")
    cx = torch.randint(PAD, W - PAD, (BATCH, 1, 1), device=device)
    cy = torch.randint(PAD, W - PAD, (BATCH, 1, 1), device=device)
    hole = ((xx - cx) ** 2 + (yy - cy) ** 2) < 100
    x = x * (~hole).unsqueeze(1)
    for _ in range(160):
        x = model(x)
    regen = loss_per_sample(x).mean()
print("regrowth loss", round(regen.item(), 5))
report("phase2 damage_regrowth")


def segment(x):
    for _ in range(16):
        x = model(x)
    return x


x = seed(BATCH)
with torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(8):
        x = checkpoint(segment, x, use_reentrant=False)
    loss = loss_per_sample(x.float()).mean()
opt.zero_grad()
loss.backward()
for p in model.parameters():
    p.grad /= p.grad.norm() + 1e-8
opt.step()
print("bf16 checkpointed rollout loss", round(loss.item(), 5))
report("phase3 bf16_checkpointed")
