"""Training EfficientViT-M4 (the MSRA one: cascaded group attention with per-head depthwise convs and
batch-norm everywhere; `timm.create_model("efficientvit_m4", pretrained=False)`) with a LAMB recipe:
`timm.optim.create_optimizer_v2(model, opt="lamb", lr=4e-3, weight_decay=0.05)` (layer-wise trust
ratios, biases and norms without weight decay), a step schedule with warmup from
`timm.scheduler.create_scheduler_v2(sched="step")` stepped per update, fp16 autocast with a
`torch.amp.GradScaler` (unscale, clip at 1.0, step, update), channels-last inputs and weights, and
`timm.utils.ModelEmaV2` (decay 0.999) updated after every step. Phase 1: 6 steps at batch 256 x 3 x
224 x 224 with label-smoothed cross entropy. Phase 2: the EMA copy evaluated under
`torch.inference_mode()` and fp16 autocast at batch 512, top-1 against random labels. Seeded. 2 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV2

torch.manual_seed(2781)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("efficientvit_m4", pretrained=False, num_classes=1000)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="lamb", lr=4e-3, weight_decay=0.05)
scheduler, num_epochs = create_scheduler_v2(
    optimizer,
    sched="step",
    num_epochs=3,
    decay_epochs=1,
    decay_rate=0.5,
    warmup_epochs=1,
    warmup_lr=1e-5,
    updates_per_epoch=2,
)
scaler = torch.amp.GradScaler("cuda")
model_ema = ModelEmaV2(model, decay=0.999)

num_updates = 0
model.train()
for epoch in range(num_epochs):
    for _it in range(2):
        x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (256,), device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        num_updates += 1
        model_ema.update(model)
        scheduler.step_update(num_updates=num_updates)
    scheduler.step(epoch + 1)
print("train", num_updates, round(loss.item(), 3), round(optimizer.param_groups[0]["lr"], 6))
report("efficientvit_m4_lamb_fp16_scaler_channels_last_ema")

del x, y, loss
ema = model_ema.module
ema.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _b in range(2):
        x = torch.randn(512, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (512,), device=dev)
        correct += (ema(x).argmax(-1) == y).sum().item()
print("ema top1", correct / 1024)
report("ema_eval_inference_mode_fp16_b512")
