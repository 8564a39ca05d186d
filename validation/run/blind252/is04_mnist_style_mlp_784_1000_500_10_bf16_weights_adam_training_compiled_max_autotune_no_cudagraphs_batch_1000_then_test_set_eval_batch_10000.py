"""The classic MNIST multilayer perceptron (784 -> 1000 -> 500 -> 10, ReLU), its weights in bf16, trained
with Adam and cross-entropy on random 28x28 images and labels (a stand-in for the data set, kept on the GPU),
compiled with `torch.compile(model, mode="max-autotune-no-cudagraphs")`: batch 1,000, the first step
(compile, Inductor's GEMM autotuning for the forward and backward), then 9 more steps; then evaluation
of a 10,000-image test set in one batch under `no_grad` (a recompile), accuracy read on the host.

Hidden size 500 and 10 classes are not multiples of 8 (Inductor's pad_mm pass considers padding those
matmuls). No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2524)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = nn.Sequential(
    nn.Flatten(), nn.Linear(784, 1000), nn.ReLU(), nn.Linear(1000, 500), nn.ReLU(), nn.Linear(500, 10)
).cuda().bfloat16()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, mode="max-autotune-no-cudagraphs")
train_x = torch.rand(20000, 1, 28, 28, device="cuda", dtype=torch.bfloat16)
train_y = torch.randint(0, 10, (20000,), device="cuda")
test_x = torch.rand(10000, 1, 28, 28, device="cuda", dtype=torch.bfloat16)
test_y = torch.randint(0, 10, (10000,), device="cuda")
report("setup")


def step(i):
    x, y = train_x[i * 1000 : (i + 1) * 1000], train_y[i * 1000 : (i + 1) * 1000]
    loss = F.cross_entropy(cmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


step(0)
report("first_step_compile")

for i in range(1, 10):
    step(i)
report("steps_2_10")

model.eval()
with torch.no_grad():
    acc = (cmodel(test_x).argmax(dim=1) == test_y).float().mean().item()
print("test accuracy", round(acc, 3))
report("test_eval")
