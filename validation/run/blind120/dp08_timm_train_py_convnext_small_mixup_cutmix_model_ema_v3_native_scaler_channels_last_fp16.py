"""timm's train.py loop for ConvNeXt, written as its train_one_epoch and validate run it: a timm
convnext_small (drop path 0.4) in channels-last, timm's Mixup (mixup 0.8, cutmix 1.0, switch 0.5,
batch mode, label smoothing 0.1) into SoftTargetCrossEntropy, create_optimizer_v2's AdamW (lr 4e-3,
weight decay 0.05, no decay on norms and biases), create_scheduler_v2's cosine with warmup stepped
per update, fp16 autocast with timm's NativeScaler (clip 1.0 by norm), ModelEmaV3 (decay 0.9998,
warmup) updated after each step; batch 96 at 224, 3 steps; then validate() on the EMA model: two
batches of 96 under no_grad and fp16 autocast, cross entropy and timm.utils.accuracy top-1/top-5;
5 phases."""

import os

import numpy as np
import timm
import torch
import torch.nn as nn
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3, NativeScaler, accuracy

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12008)
np.random.seed(12008)
B, IMG, ARCH = (4, 64, "convnext_atto") if SMALL else (96, 224, "convnext_small")
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model(ARCH, num_classes=1000, drop_path_rate=0.4)
model.to(device=device, memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="adamw", lr=4e-3, weight_decay=0.05)
loss_scaler = NativeScaler(device=device)
model_ema = ModelEmaV3(model, decay=0.9998, use_warmup=True, device=device)
lr_scheduler, num_epochs = create_scheduler_v2(
    optimizer,
    sched="cosine",
    num_epochs=300,
    warmup_epochs=5,
    warmup_lr=1e-6,
    step_on_epochs=False,
    updates_per_epoch=1251,
)
mixup_fn = Mixup(
    mixup_alpha=0.8,
    cutmix_alpha=1.0,
    prob=1.0,
    switch_prob=0.5,
    mode="batch",
    label_smoothing=0.1,
    num_classes=1000,
)
train_loss_fn = SoftTargetCrossEntropy().to(device)
validate_loss_fn = nn.CrossEntropyLoss().to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
num_updates = 0
for batch_idx in range(3):
    input = torch.randn(B, 3, IMG, IMG, device=device)
    target = torch.randint(0, 1000, (B,), device=device)
    input, target = mixup_fn(input, target)
    input = input.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=torch.float16):
        output = model(input)
        loss = train_loss_fn(output, target)
    optimizer.zero_grad()
    loss_scaler(
        loss, optimizer, clip_grad=1.0, clip_mode="norm", parameters=model.parameters(), create_graph=False
    )
    num_updates += 1
    model_ema.update(model, step=num_updates)
    lr_scheduler.step_update(num_updates=num_updates, metric=None)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {batch_idx} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.2e}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del input, target, output, loss

eval_model = model_ema.module
eval_model.eval()
top1 = top5 = 0.0
with torch.no_grad():
    for _ in range(2):
        input = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, 1000, (B,), device=device)
        with torch.autocast(device, dtype=torch.float16):
            output = eval_model(input)
            loss = validate_loss_fn(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        top1, top5 = top1 + acc1.item(), top5 + acc5.item()
if device == "cuda":
    print(
        f"validate top1 {top1 / 2:.2f} top5 {top5 / 2:.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
