"""torchvision's video transformers from scratch (weights=None). MViTv2-S for Something-Something
v2 (174 classes; its clips are fixed at 16 x 224 x 224 by the builder) trained with fp16
autocast and torch.amp.GradScaler: fused AdamW (lr 1e-4, betas 0.9/0.999) with two parameter
groups as the usual recipe builds them (weight decay 0.05 on weights of 2+ dims, none on biases,
norms and the position/cls parameters), clip_grad_norm_(1.0) after unscale_, batch 4 x 16 x 224 x
224, 2 steps (each its own phase); then MViT and its optimizer deleted, torch.cuda.empty_cache(),
and Swin3D-T (400 classes) cast whole to bf16 (pure bf16, no autocast) evaluated under
inference_mode on 16-frame clips at batch 8 (Swin's build in that phase) and 32-frame clips at
batch 4 (each its own phase), the softmax averaged over the batch; 6 phases (the last empty)."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15904)
if SMALL:
    B, T, S, EVAL = 1, 16, 224, [(1, 4), (1, 8)]
else:
    B, T, S, EVAL = 4, 16, 224, [(8, 16), (4, 32)]
EVAL_S = 64 if SMALL else 224
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.video.mvit_v2_s(weights=None, num_classes=174)
model = model.to(device)
decay, no_decay = [], []
for name, param in model.named_parameters():
    if not param.requires_grad:
        continue
    if param.ndim <= 1 or name.endswith(".bias") or "pos" in name or "class_token" in name:
        no_decay.append(param)
    else:
        decay.append(param)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-4,
    betas=(0.9, 0.999),
    fused=device == "cuda",
)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
criterion = nn.CrossEntropyLoss()
print(f"mvit params {sum(p.numel() for p in model.parameters())} decay {len(decay)} no decay {len(no_decay)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    clips = torch.randn(B, 3, T, S, S, device=device)
    labels = torch.randint(0, 174, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = criterion(model(clips), labels)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    if device == "cuda":
        print(
            f"mvit step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del model, optimizer, scaler, decay, no_decay, clips, labels, loss
if device == "cuda":
    torch.cuda.empty_cache()
swin = torchvision.models.video.swin3d_t(weights=None, num_classes=400).to(
    device=device, dtype=torch.bfloat16
)
swin.eval()
if device == "cuda":
    print(f"swin {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

for batch, frames in EVAL:
    with torch.inference_mode():
        clips = torch.randn(batch, 3, frames, EVAL_S, EVAL_S, device=device, dtype=torch.bfloat16)
        logits = swin(clips)
        mean_prob = logits.float().softmax(dim=-1).mean(dim=0)
    print(f"swin T={frames} B={batch} top {mean_prob.argmax().item()}")
    if device == "cuda":
        print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
