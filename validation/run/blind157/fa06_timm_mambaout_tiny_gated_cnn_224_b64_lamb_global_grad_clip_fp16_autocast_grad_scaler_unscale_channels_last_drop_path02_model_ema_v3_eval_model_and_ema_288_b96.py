"""MambaOut tiny (timm's mambaout_tiny, pretrained=False: Gated CNN blocks without the SSM, a
LayerNorm, an expanding linear split into gate, identity and a 7 x 7 depthwise-conv branch over a
quarter of the channels, channels-last NHWC inside the stages, drop path 0.2) trained with
create_optimizer_v2(opt="lamb", lr=4e-3, weight_decay=0.05) (timm's LAMB with its global grad-norm
clipping at 1.0 and trust ratios, norms and biases without decay), fp16 autocast with a GradScaler
(init scale 2 ** 12), the gradients unscaled before the step; channels_last input; timm.utils.ModelEmaV3
(decay 0.999, no warmup); 224 x 224 at batch 64, 3 steps, each its own phase; then evaluation at the
model's test size 288 x 288 in batches of 96 under no_grad and fp16 autocast, first of the trained
model, then of the EMA copy, each over two batches and each its own phase; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
from timm.optim import create_optimizer_v2
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15706)
B, RES, EB, ERES, NCLS = (4, 64, 4, 96, 10) if SMALL else (64, 224, 96, 288, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = timm.create_model("mambaout_tiny", pretrained=False, num_classes=NCLS, drop_path_rate=0.2)
model = model.to(device).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="lamb", lr=4e-3, weight_decay=0.05)
loss_scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12, enabled=amp)
ema = ModelEmaV3(model, decay=0.999)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        preds = model(images)
        loss = criterion(preds, labels)
    optimizer.zero_grad(set_to_none=True)
    loss_scaler.scale(loss).backward()
    loss_scaler.unscale_(optimizer)
    loss_scaler.step(optimizer)
    loss_scaler.update()
    ema.update(model)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} scale {loss_scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del images, labels, preds, loss


def evaluate(net, tag):
    net.eval()
    correct = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        for _ in range(2):
            images = torch.randn(EB, 3, ERES, ERES, device=device).contiguous(
                memory_format=torch.channels_last
            )
            labels = torch.randint(0, NCLS, (EB,), device=device)
            correct += (net(images).argmax(-1) == labels).sum().item()
    if device == "cuda":
        print(
            f"eval {tag} acc {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


evaluate(model, "model")
evaluate(ema.module, "ema")
