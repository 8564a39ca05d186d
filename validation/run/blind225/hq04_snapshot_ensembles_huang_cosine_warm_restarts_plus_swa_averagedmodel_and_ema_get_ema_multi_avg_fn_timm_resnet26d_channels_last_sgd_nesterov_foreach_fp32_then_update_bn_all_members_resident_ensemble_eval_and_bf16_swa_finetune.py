"""Snapshot ensembles (Huang et al. 2017, "Train 1, get M for free") with SWA and an EMA model on the same
run: a timm resnet26d (pretrained=False, 100 classes, BatchNorm) in channels_last trained in fp32 by SGD
(nesterov, momentum 0.9, foreach) under torch.optim.lr_scheduler.CosineAnnealingWarmRestarts (T_0 = 3
steps); at the end of each cosine cycle a `copy.deepcopy` snapshot of the model is kept on the GPU (3
cycles, 3 snapshots). torch.optim.swa_utils.AveragedModel averages the weights over the last cycle
(update_parameters each step), and a second AveragedModel with get_ema_multi_avg_fn(0.99) and
use_buffers=True tracks an EMA every step. Batch 96 at 176 x 176, label smoothing 0.1.

Phases: the 9 training steps; torch.optim.swa_utils.update_bn over a list of 6 device batches (BN
statistics recomputed for the SWA model); no_grad evaluation at batch 256 with every member resident
(3 snapshots, SWA, EMA, the live model): per-member accuracy, the snapshot ensemble's mean softmax and NLL;
then the snapshots and EMA freed, empty_cache(), and the SWA model's module fine-tuned for 3 steps under
bf16 autocast at batch 128 by a fresh SGD. 4 phases."""

import copy

import timm
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, update_bn

torch.manual_seed(22504)
device = "cuda"
B, RES, NCLS, T0, CYCLES = 96, 176, 100, 3, 3


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    x = torch.randn(n, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, NCLS, (n,), device=device)


model = timm.create_model("resnet26d", pretrained=False, num_classes=NCLS).to(device)
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-5, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=T0, eta_min=1e-4)
swa_model = AveragedModel(model)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99), use_buffers=True)
snapshots = []

model.train()
for step in range(T0 * CYCLES):
    x, y = batch(B)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    ema_model.update_parameters(model)
    if step >= T0 * (CYCLES - 1):
        swa_model.update_parameters(model)
    if (step + 1) % T0 == 0:
        snapshots.append(copy.deepcopy(model))
        print(f"snapshot {len(snapshots)} at step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.4f}")
report("snapshot training")

loader = [batch(B)[0] for _ in range(6)]
update_bn(loader, swa_model, device=device)
del loader
report("update_bn")

members = {f"snap{i}": m for i, m in enumerate(snapshots)} | {"swa": swa_model, "ema": ema_model, "live": model}
for m in members.values():
    m.eval()
with torch.no_grad():
    x, y = batch(256)
    probs = {}
    for name, m in members.items():
        probs[name] = m(x).softmax(-1)
    ens = torch.stack([probs[f"snap{i}"] for i in range(CYCLES)]).mean(0)
    accs = {name: (p.argmax(-1) == y).float().mean() for name, p in probs.items()}
    nll = F.nll_loss(ens.clamp_min(1e-8).log(), y)
print({k: round(v.item(), 3) for k, v in accs.items()}, "snapshot ensemble nll", nll.item())
report("all members eval")

del members, snapshots, ema_model, probs, ens, x, y, opt, sched
torch.cuda.empty_cache()
net = swa_model.module
net.train()
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
for step in range(3):
    x, y = batch(128)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("bf16 swa fine-tune loss", loss.item(), "max allocated", torch.cuda.max_memory_allocated())
report("bf16 swa fine-tune")
