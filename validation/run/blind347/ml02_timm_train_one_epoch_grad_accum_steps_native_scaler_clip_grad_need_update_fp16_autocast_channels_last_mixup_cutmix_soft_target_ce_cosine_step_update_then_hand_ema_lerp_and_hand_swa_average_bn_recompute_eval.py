"""timm's train.py `train_one_epoch` re-written by hand for `--grad-accum-steps 2`: a timm `resnet26d` (1000
classes) in `channels_last`, `create_optimizer_v2(opt="sgd")` (nesterov momentum, no weight decay on biases
and norms), `CosineLRScheduler.step_update` once per optimizer update, `amp_autocast = partial(torch.autocast,
device_type, dtype=float16)`, timm's `NativeScaler` called with `clip_grad=1.0, clip_mode="norm",
parameters=model.parameters(), need_update=need_update` (backward every micro-batch, unscale + clip + step +
update only on the last micro-batch of each update), `Mixup` (mixup 0.8 / cutmix 1.0, label smoothing 0.1)
with `SoftTargetCrossEntropy`, `loss.item()` per micro-batch for the meter and `optimizer.zero_grad()` after
each update.

Beside it an EMA by hand (a `deepcopy` in eval mode, every float entry of the state dict `lerp_`-ed towards
the model's after each update, buffers copied) and SWA by hand (a second copy averaging the parameters with
`add_((p - s) / (n + 1))` after each update of a constant-lr epoch, then its BatchNorm statistics recomputed:
`reset_running_stats()`, `momentum = None`, forward passes in train mode under `no_grad`).

Phases: 0 model, EMA copy, optimizer, scaler; 1 the timm epoch (6 micro-batches of 64 x 224, 3 updates);
2 the SWA epoch (4 micro-batches, 2 updates, averaging); 3 the SWA BatchNorm recompute (4 batches of 128);
4 evaluation of the model, the EMA and the SWA copy at batch 256 under `no_grad` and fp16 autocast."""

import copy
import os
import random
from functools import partial

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import NativeScaler

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(42)
np.random.seed(42)
random.seed(42)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
B, IMG, EVAL_B, BN_B = (4, 64, 8, 4) if SMALL else (64, 224, 256, 128)
grad_accum_steps, clip_grad, clip_mode, ema_decay, swa_lr = 2, 1.0, "norm", 0.9998, 0.05


def report(tag):
    if device.type == "cuda":
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(tag)


def loader(n, bs):
    for _ in range(n):
        x = torch.randn(bs, 3, IMG, IMG, device=device)
        y = torch.randint(0, 1000, (bs,), device=device)
        yield x, y


@torch.no_grad()
def ema_update(ema, model, decay):
    for e, m in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
        if e.dtype.is_floating_point:
            e.lerp_(m, 1.0 - decay)
        else:
            e.copy_(m)


@torch.no_grad()
def swa_update(swa, model, n_averaged):
    for s, p in zip(swa.parameters(), model.parameters(), strict=True):
        s.add_((p.detach() - s) / (n_averaged + 1))


model = timm.create_model("resnet26d", num_classes=1000, drop_rate=0.0, drop_path_rate=0.05)
model.to(device=device, memory_format=torch.channels_last)
model_ema = copy.deepcopy(model).eval()
for p in model_ema.parameters():
    p.requires_grad_(False)
optimizer = create_optimizer_v2(model, opt="sgd", lr=0.2, weight_decay=5e-5, momentum=0.9)
lr_scheduler = CosineLRScheduler(optimizer, t_initial=10, warmup_t=0, lr_min=1e-5, t_in_epochs=False)
amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)
loss_scaler = NativeScaler(device=device.type)
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=1000)
train_loss_fn = SoftTargetCrossEntropy()
report("model, EMA copy, optimizer and NativeScaler")


def train_one_epoch(epoch, n_batches, num_updates, swa=None, n_averaged=0):
    model.train()
    last_idx = n_batches - 1
    last_accum_steps = n_batches % grad_accum_steps
    updates_per_epoch = (n_batches + grad_accum_steps - 1) // grad_accum_steps
    last_batch_idx_to_accum = n_batches - last_accum_steps
    losses = []
    optimizer.zero_grad()
    for batch_idx, (input, target) in enumerate(loader(n_batches, B)):
        last_batch = batch_idx == last_idx
        need_update = last_batch or (batch_idx + 1) % grad_accum_steps == 0
        accum_steps = grad_accum_steps
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps or grad_accum_steps
        input, target = mixup_fn(input, target)
        input = input.contiguous(memory_format=torch.channels_last)
        with amp_autocast():
            output = model(input)
            loss = train_loss_fn(output, target)
        if accum_steps > 1:
            loss /= accum_steps
        loss_scaler(
            loss,
            optimizer,
            clip_grad=clip_grad,
            clip_mode=clip_mode,
            parameters=model.parameters(),
            create_graph=False,
            need_update=need_update,
        )
        losses.append(loss.item() * accum_steps)
        if not need_update:
            continue
        num_updates += 1
        optimizer.zero_grad()
        ema_update(model_ema, model, ema_decay)
        if swa is not None:
            swa_update(swa, model, n_averaged)
            n_averaged += 1
        else:
            lr_scheduler.step_update(num_updates=num_updates)
    print(f"epoch {epoch}: {updates_per_epoch} updates, loss {sum(losses) / len(losses):.4f}")
    return num_updates, n_averaged


num_updates, _ = train_one_epoch(0, 6, 0)
report("timm epoch, grad accum 2, NativeScaler clip_grad")

for group in optimizer.param_groups:
    group["lr"] = swa_lr
swa_model = copy.deepcopy(model)
num_updates, n_averaged = train_one_epoch(1, 4, num_updates, swa=swa_model, n_averaged=1)
print("SWA models averaged:", n_averaged)
report("SWA epoch, hand averaging")

momenta = {}
for module in swa_model.modules():
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
        module.reset_running_stats()
        momenta[module] = module.momentum
        module.momentum = None
swa_model.train()
with torch.no_grad(), amp_autocast():
    for input, _ in loader(4, BN_B):
        swa_model(input.contiguous(memory_format=torch.channels_last))
for module, momentum in momenta.items():
    module.momentum = momentum
report("SWA BatchNorm recompute")

model.eval()
swa_model.eval()
x = torch.randn(EVAL_B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (EVAL_B,), device=device)
with torch.no_grad(), amp_autocast():
    for name, net in (("model", model), ("ema", model_ema), ("swa", swa_model)):
        top1 = (net(x).argmax(-1) == y).float().mean()
        print(f"{name} top1 {top1.item():.4f}")
report("evaluation of model, EMA and SWA")
