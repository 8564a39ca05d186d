"""An energy-based image model trained by contrastive divergence, fp32: a 6-conv Swish energy
network on 32x32x3; negatives come from a GPU replay buffer of 8,192 images (indices from
torch.randint, 5% of the drawn ones chosen by a torch.rand mask reset to uniform noise through
boolean indexing) refined by 30 Langevin steps (autograd.grad of the energy sum w.r.t. the images,
torch.randn_like noise each step); the loss adds an energy-magnitude term and a gradient penalty
on the data (autograd.grad with create_graph=True, then backward through it), Adam, batch 128,
3 steps; then 60 Langevin steps from noise for 256 samples; 5 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9406)
B, BUF, K, CH, GEN = (8, 64, 3, 8, 16) if SMALL else (128, 8192, 30, 128, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, stride):
    return [nn.Conv2d(cin, cout, 3, stride, 1), nn.SiLU()]


energy = nn.Sequential(
    *block(3, CH, 1),
    *block(CH, CH, 1),
    *block(CH, 2 * CH, 2),
    *block(2 * CH, 2 * CH, 1),
    *block(2 * CH, 4 * CH, 2),
    *block(4 * CH, 4 * CH, 2),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(4 * CH, 1),
).to(device)
optimizer = torch.optim.Adam(energy.parameters(), lr=1e-4, betas=(0.0, 0.999))
buffer = torch.rand(BUF, 3, 32, 32, device=device) * 2 - 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def langevin(x, steps, step_size=10.0, noise=0.005):
    x = x.detach()
    for p in energy.parameters():
        p.requires_grad_(False)
    for _ in range(steps):
        x.requires_grad_(True)
        (g,) = torch.autograd.grad(energy(x).sum(), x)
        x = (x - step_size * g + noise * torch.randn_like(x)).clamp(-1, 1).detach()
    for p in energy.parameters():
        p.requires_grad_(True)
    return x


for step in range(3):
    data = torch.rand(B, 3, 32, 32, device=device) * 2 - 1
    idx = torch.randint(0, BUF, (B,), device=device)
    init = buffer[idx]
    reset = torch.rand(B, device=device) < 0.05
    init[reset] = torch.rand(int(reset.sum()), 3, 32, 32, device=device) * 2 - 1
    neg = langevin(init, K)
    buffer[idx] = neg
    data.requires_grad_(True)
    e_pos, e_neg = energy(data), energy(neg)
    (g_data,) = torch.autograd.grad(e_pos.sum(), data, create_graph=True)
    penalty = g_data.flatten(1).pow(2).sum(1).mean()
    loss = e_pos.mean() - e_neg.mean() + 0.1 * (e_pos.pow(2).mean() + e_neg.pow(2).mean()) + 0.01 * penalty
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    del data, idx, init, reset, neg, e_pos, e_neg, g_data, penalty, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

samples = langevin(torch.rand(GEN, 3, 32, 32, device=device) * 2 - 1, 2 * K)
if device == "cuda":
    print(
        f"sample {tuple(samples.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
