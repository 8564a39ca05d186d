"""Multi-scale training as detectors do it (YOLO-style: a new input resolution every 10 iterations), with
PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,garbage_collection_threshold:0.7 set before torch is imported
and torch.cuda.set_per_process_memory_fraction(0.05) (about 7 GB of the H200) before the first tensor, so the
allocator's cached-block garbage collection has a limit to act against. torchvision's resnet18
(weights=None, 100 classes), batch 64, the side drawn every 10 steps by a seeded random.Random from
{256, 384, 448, 512} (square images), bf16 autocast, SGD (momentum 0.9, nesterov, weight decay 5e-4),
cross-entropy with label smoothing 0.1. cudnn.benchmark stays off.

Phases: set-up; 100 steps (10 resolutions); 100 more steps; evaluation under no_grad at 6 sizes, batch 64,
from 224 to 512; torch.cuda.empty_cache() then 30 steps with the side drawn per step. 5 phases. Every
shape comes from the host RNG."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128,garbage_collection_threshold:0.7"

import random

import torch
import torch.nn.functional as F
import torchvision

torch.cuda.set_per_process_memory_fraction(0.05)
torch.manual_seed(25503)
rng = random.Random(255030)
SIDES = [256, 384, 448, 512]
model = torchvision.models.resnet18(weights=None, num_classes=100).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()} "
        f"retries {torch.cuda.memory_stats()['num_alloc_retries']}"
    )
    torch.cuda.reset_peak_memory_stats()


def step(side, batch=64):
    x = torch.randn(batch, 3, side, side, device="cuda")
    y = torch.randint(0, 100, (batch,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def train(steps, every):
    model.train()
    side = rng.choice(SIDES)
    for i in range(steps):
        if i % every == 0:
            side = rng.choice(SIDES)
        step(side)


report("setup")
train(100, 10)
report("multiscale_steps_0_99")
train(100, 10)
report("multiscale_steps_100_199")

model.eval()
with torch.no_grad():
    for side in (224, 256, 384, 448, 512, 320):
        x = torch.randn(64, 3, side, side, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        del x, out
report("eval_six_sizes_batch_64")

torch.cuda.empty_cache()
train(30, 1)
report("empty_cache_then_30_steps_side_per_step")
