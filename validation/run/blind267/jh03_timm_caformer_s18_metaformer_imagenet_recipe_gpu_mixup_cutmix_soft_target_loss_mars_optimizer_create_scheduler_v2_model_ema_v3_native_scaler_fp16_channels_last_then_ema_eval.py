"""The timm ImageNet training recipe as `train.py` composes it, on CAFormer-S18 (MetaFormer with
separable-conv token mixers in stages 1-2 and attention in stages 3-4; `timm.create_model(
"caformer_s18", pretrained=False, drop_path_rate=0.15)`), channels-last, fp16 autocast with timm's
`NativeScaler` (a `torch.amp.GradScaler` with gradient clipping at 5.0 after unscale), the MARS
optimizer from `timm.optim.create_optimizer_v2(model, opt="mars", lr=3e-3, weight_decay=0.05)`
(variance-reduced AdamW keeping last_grad beside exp_avg and exp_avg_sq), a cosine schedule with
warmup from `timm.scheduler.create_scheduler_v2` stepped per update, `timm.data.Mixup` (mixup 0.8 /
cutmix 1.0, switch prob 0.5, label smoothing 0.1) applied to CUDA batches, `SoftTargetCrossEntropy`,
and `timm.utils.ModelEmaV3` (decay 0.9998 with warmup) updated after every step. Phase 1: 6 steps at
batch 64 x 3 x 224 x 224. Phase 2: the EMA model evaluated under `torch.no_grad()` and fp16
autocast at batch 128, top-1 against random labels. NumPy and torch seeded (Mixup draws with
NumPy). 2 phases."""

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3, NativeScaler

torch.manual_seed(2673)
np.random.seed(2673)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("caformer_s18", pretrained=False, num_classes=1000, drop_path_rate=0.15)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="mars", lr=3e-3, weight_decay=0.05)
scheduler, num_epochs = create_scheduler_v2(
    optimizer, sched="cosine", num_epochs=3, warmup_epochs=1, warmup_lr=1e-5, min_lr=1e-5, updates_per_epoch=2
)
loss_scaler = NativeScaler()
mixup_fn = Mixup(
    mixup_alpha=0.8,
    cutmix_alpha=1.0,
    prob=1.0,
    switch_prob=0.5,
    mode="batch",
    label_smoothing=0.1,
    num_classes=1000,
)
criterion = SoftTargetCrossEntropy()
model_ema = ModelEmaV3(model, decay=0.9998, use_warmup=True)

num_updates = 0
for epoch in range(num_epochs):
    for _it in range(2):
        x = torch.randn(64, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (64,), device=dev)
        x, y = mixup_fn(x, y)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss_scaler(loss, optimizer, clip_grad=5.0, clip_mode="norm", parameters=model.parameters())
        num_updates += 1
        model_ema.update(model, step=num_updates)
        scheduler.step_update(num_updates=num_updates)
    scheduler.step(epoch + 1)
print("train", num_updates, round(loss.item(), 3), round(optimizer.param_groups[0]["lr"], 6))
report("caformer_s18_mars_mixup_ema_fp16_channels_last")

del x, y, loss
model_ema.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    for _b in range(2):
        x = torch.randn(128, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (128,), device=dev)
        correct += (model_ema(x).argmax(-1) == y).sum().item()
print("ema top1", correct / 256)
report("model_ema_v3_eval_fp16_no_grad")
