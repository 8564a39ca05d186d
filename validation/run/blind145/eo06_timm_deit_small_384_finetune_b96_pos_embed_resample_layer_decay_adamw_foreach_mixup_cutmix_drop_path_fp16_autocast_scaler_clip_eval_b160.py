"""DeiT-S fine-tuned at 384 x 384 as DeiT's fine-tuning recipe does it under timm: timm's
deit_small_patch16_224 built from its constructor with img_size=384 (576 patches + class token,
the position embedding sized for 24 x 24), drop_path_rate 0.1, fused SDPA attention; AdamW
(foreach) from create_optimizer_v2 with weight decay 0.05 and BEiT-style layer-wise lr decay 0.75,
timm's Mixup (mixup 0.8, cutmix 1.0, label smoothing 0.1) on the device batch with NumPy seeded,
SoftTargetCrossEntropy, fp16 autocast with a GradScaler (init scale 2 ** 10, no step skipped),
gradients unscaled and clipped to norm 1.0; batch 96, 4 steps, contiguous images; then
evaluation in batches of 160 under no_grad and fp16 autocast with the class-token features
kept (forward_features, forward_head(pre_logits=True)) and the logits' top-1; 6 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14506)
np.random.seed(14506)
B, RES, EB, NCLS = (4, 64, 4, 10) if SMALL else (96, 384, 160, 1000)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model(
    "deit_small_patch16_224", pretrained=False, num_classes=NCLS, img_size=RES, drop_path_rate=0.1
)
model = model.to(device)
opt = create_optimizer_v2(model, opt="adamw", lr=5e-6 * B / 512 * 8, weight_decay=0.05, layer_decay=0.75)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, enabled=device == "cuda")
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=NCLS)
criterion = SoftTargetCrossEntropy()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    x, y_soft = mixup_fn(x, y)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = criterion(model(x), y_soft)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, x, y, y_soft
model.eval()
feats, correct = [], 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device)
        y = torch.randint(0, NCLS, (EB,), device=device)
        tokens = model.forward_features(x)
        feats.append(model.forward_head(tokens, pre_logits=True))
        correct += (model.forward_head(tokens).argmax(-1) == y).sum().item()
emb = torch.cat(feats)
if device == "cuda":
    print(
        f"eval top1 {correct / (2 * EB):.3f} emb {tuple(emb.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
