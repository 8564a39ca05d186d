"""A fast.ai-style recipe in plain PyTorch on a CIFAR-shaped dataset: torchvision resnet18 adapted to
32x32 inputs (3x3 stem, no max-pool, 10 classes), a learning-rate range test (Smith 2015 / fastai
lr_find: the initial weights saved with copy.deepcopy(model.state_dict()) on the GPU, lr raised
exponentially over 8 mini-batches by a LambdaLR, losses recorded as Python floats), the weights restored
with load_state_dict and the snapshot deleted; then training with SGD (nesterov, momentum 0.9) whose
parameter groups keep BatchNorm and bias parameters out of weight decay, a ChainedScheduler of a
LinearLR warmup and an ExponentialLR decay, fp16 autocast with torch.amp.GradScaler and gradient
accumulation over 2 micro-batches (unscale_ + clip_grad_norm_ before step); batches come from a
TensorDataset in pinned host memory through a DataLoader (pin_memory=True, non_blocking copies); then
evaluation under inference_mode with horizontal-flip test-time augmentation (softmax averaged over
torch.flip(x, dims=[3])).

Phases: 0 model and data; 1 LR range test; 2 state restored; 3 training (6 optimizer steps); 4 TTA eval."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, TensorDataset

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(30402)
device = "cuda" if torch.cuda.is_available() else "cpu"
N, B, FIND, STEPS, ACC = (64, 8, 3, 2, 2) if SMALL else (8192, 256, 8, 6, 2)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = torchvision.models.resnet18(num_classes=10)
model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
model.maxpool = nn.Identity()
model = model.to(device)

images = torch.randn(N, 3, 32, 32)
labels = torch.randint(0, 10, (N,))
ds = TensorDataset(images, labels)
loader = DataLoader(ds, batch_size=B, shuffle=True, drop_last=True, pin_memory=device == "cuda")
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
report("setup")

# LR range test.
init_state = copy.deepcopy(model.state_dict())
finder_opt = torch.optim.SGD(model.parameters(), lr=1e-7, momentum=0.9)
gamma = (10.0 / 1e-7) ** (1 / (FIND - 1))
finder_sched = torch.optim.lr_scheduler.LambdaLR(finder_opt, lambda i: gamma**i)
lrs, losses = [], []
model.train()
it = iter(loader)
for i in range(FIND):
    xb, yb = next(it)
    xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
    loss = crit(model(xb), yb)
    finder_opt.zero_grad()
    loss.backward()
    finder_opt.step()
    lrs.append(finder_sched.get_last_lr()[0])
    losses.append(loss.item())
    finder_sched.step()
print("lr_find", [f"{lr:.1e}:{l:.3f}" for lr, l in zip(lrs, losses)])
report("lr_find")

model.load_state_dict(init_state)
del init_state, finder_opt, finder_sched
for p in model.parameters():
    p.grad = None
report("restored")

decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 else decay).append(p)
opt = torch.optim.SGD(
    [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.1,
    momentum=0.9,
    nesterov=True,
)
sched = torch.optim.lr_scheduler.ChainedScheduler(
    [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3),
        torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.95),
    ],
    optimizer=opt,
)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=device == "cuda")
model.train()
it = iter(loader)
for step in range(STEPS):
    for micro in range(ACC):
        xb, yb = next(it)
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
            loss = crit(model(xb), yb) / ACC
        scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    print(f"step {step} loss {loss.item() * ACC:.4f} gnorm {gn.item():.3f} lr {sched.get_last_lr()[0]:.4f}")
report("train")

model.eval()
correct = 0
with torch.inference_mode():
    for xb, yb in DataLoader(ds, batch_size=2 * B, pin_memory=device == "cuda"):
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
            p = F.softmax(model(xb), -1) + F.softmax(model(torch.flip(xb, dims=[3])), -1)
        correct += (p.argmax(-1) == yb).sum().item()
print(f"tta acc {correct / N:.4f}")
report("eval")
