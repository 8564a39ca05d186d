"""Growing Neural Cellular Automata the way Mordvintsev et al.'s distill.pub notebook and its PyTorch ports
train them (the "persistent" + "regenerating" experiment): a 16-channel cell state on a 72 x 72 grid
(RGBA + 12 hidden channels), perception by a fixed depthwise convolution that stacks the identity and
the Sobel x/y filters per channel (`F.conv2d(x, kernel, padding=1, groups=16)`, 48 channels), an update
rule of two 1x1 convolutions (48 -> 128, ReLU, 128 -> 16, the last zero-initialised, no bias), a
stochastic per-cell fire-rate mask (`torch.rand(...) <= 0.5`, a float mask multiplied in), and the alive
masking (`F.max_pool2d(alpha, 3, 1, 1) > 0.1` before and after the update, `&`-ed). The target is a
synthetic 40 x 40 RGBA shape drawn with a seeded generator, padded to 72. Training as the notebook: a
sample pool of 1,024 states on the GPU, batches of 8 drawn from it by a seeded CPU generator, the
highest-loss sample replaced by the seed, the 3 lowest-loss ones damaged by zeroing a random circle, a
random number of CA steps in [64, 96) drawn on the CPU (the whole rollout back-propagated: 64-96
steps' activations held at once), per-channel RGBA MSE, every parameter's gradient normalised by its own
norm (`p.grad / (p.grad.norm() + 1e-8)`) before Adam (lr 2e-3), the batch written back into the pool by
index. fp32. Phase 0: the model and the pool. Phase 1: 8 training steps. Phase 2: no_grad regrowth of 64
seeds for 256 steps, half of them damaged at step 128. Sizes fixed (the step counts come from a seeded CPU
generator). 3 phases and the end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2714)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


CH, HID, SIZE, PAD, POOL, BATCH, FIRE = 16, 128, 40, 16, 1024, 8, 0.5
W = SIZE + 2 * PAD
cpu = torch.Generator().manual_seed(27)


def make_target():
    # a seeded RGBA "emoji": a soft disc with two coloured lobes, premultiplied alpha
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, SIZE), torch.linspace(-1, 1, SIZE), indexing="ij")
    r = (xx**2 + yy**2).sqrt()
    alpha = (1.2 - r * 1.3).clamp(0, 1)
    rgb = torch.stack([0.9 - 0.4 * yy.clamp(min=0), 0.6 + 0.3 * xx, 0.2 + 0.5 * (xx * yy).abs()], 0)
    rgb = rgb + 0.05 * torch.randn(3, SIZE, SIZE, generator=cpu)
    img = torch.cat([rgb.clamp(0, 1) * alpha, alpha[None]], 0)
    return F.pad(img, (PAD, PAD, PAD, PAD))


class CAModel(nn.Module):
    def __init__(self):
        super().__init__()
        ident = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
        sobel_x = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
        kernel = torch.stack([ident, sobel_x, sobel_x.T])  # (3, 3, 3)
        self.register_buffer("kernel", kernel.repeat(CH, 1, 1)[:, None])  # (48, 1, 3, 3)
        self.w1 = nn.Conv2d(3 * CH, HID, 1)
        self.w2 = nn.Conv2d(HID, CH, 1, bias=False)
        nn.init.zeros_(self.w2.weight)

    def perceive(self, x):
        return F.conv2d(x, self.kernel, padding=1, groups=CH)

    @staticmethod
    def alive(x):
        return F.max_pool2d(x[:, 3:4], kernel_size=3, stride=1, padding=1) > 0.1

    def forward(self, x, fire_rate=FIRE):
        pre = self.alive(x)
        dx = self.w2(F.relu(self.w1(self.perceive(x))))
        update = (torch.rand(x[:, :1].shape, device=x.device) <= fire_rate).to(x.dtype)
        x = x + dx * update
        post = self.alive(x)
        return x * (pre & post).to(x.dtype)


def seed_state(n):
    x = torch.zeros(n, CH, W, W, device=dev)
    x[:, 3:, W // 2, W // 2] = 1.0
    return x


def damage(x, n):
    # zero a random circle in each of the n states (centres and radii from the CPU generator)
    yy, xx = torch.meshgrid(
        torch.linspace(-1, 1, W, device=dev), torch.linspace(-1, 1, W, device=dev), indexing="ij"
    )
    c = (torch.rand(n, 2, generator=cpu) - 0.5).to(dev)
    r = (0.1 + 0.3 * torch.rand(n, 1, 1, generator=cpu)).to(dev)
    mask = ((xx[None] - c[:, 0, None, None]) ** 2 + (yy[None] - c[:, 1, None, None]) ** 2) < r**2
    return x * (~mask)[:, None].to(x.dtype)


target = make_target().to(dev)
ca = CAModel().to(dev)
opt = torch.optim.Adam(ca.parameters(), lr=2e-3)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2000], 0.1)
pool = seed_state(POOL)
print(sum(p.numel() for p in ca.parameters()), "parameters")
report("ca_built_pool_1024")


def loss_f(x):
    return ((x[:, :4] - target[None]) ** 2).mean(dim=(1, 2, 3))


for step in range(8):
    idx = torch.randperm(POOL, generator=cpu)[:BATCH].to(dev)
    x0 = pool[idx]
    with torch.no_grad():
        order = loss_f(x0).argsort(descending=True)
    x0 = x0[order]
    idx = idx[order]
    x0[:1] = seed_state(1)
    x0[-3:] = damage(x0[-3:], 3)
    n_steps = int(torch.randint(64, 96, (1,), generator=cpu))
    x = x0
    for _ in range(n_steps):
        x = ca(x)
    per_sample = loss_f(x)
    loss = per_sample.mean()
    opt.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in ca.parameters():
            p.grad /= p.grad.norm() + 1e-8
    opt.step()
    sched.step()
    pool[idx] = x.detach()
    print(step, n_steps, round(loss.item(), 5))
report("train_8_pool_steps_bptt")

with torch.no_grad():
    x = seed_state(64)
    for t in range(256):
        if t == 128:
            x[:32] = damage(x[:32], 32)
        x = ca(x)
    print("regrown", round(loss_f(x).mean().item(), 5))
report("no_grad_regrowth_64x256_steps")
print("done")
