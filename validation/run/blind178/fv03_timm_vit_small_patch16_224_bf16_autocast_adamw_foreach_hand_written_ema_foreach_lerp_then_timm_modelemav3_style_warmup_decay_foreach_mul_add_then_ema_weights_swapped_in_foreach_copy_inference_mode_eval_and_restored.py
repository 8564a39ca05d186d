"""A hand-written exponential moving average of a vision transformer's weights as training scripts
write it without a helper class: timm's vit_small_patch16_224 (12 blocks of 384, 6 heads, 1,000
classes; timm.create_model, no pretrained weights) at batch 128 x 3 x 224 x 224 from a seeded CPU
generator, bf16 autocast, label-smoothed cross entropy (0.1), AdamW(foreach=True, lr 1e-3, weight
decay 0.05), clipping at 1.0. The EMA is a list of fp32 detached clones of the parameters; phase 2
updates it with torch._foreach_lerp_(ema, params, 1 - 0.999) under no_grad after each step (as
lucidrains' ema-pytorch and many training loops do); phase 3 with timm ModelEmaV3's warmup decay
(min(0.9998, (1 + step) / (10 + step))) written out as torch._foreach_mul_(ema, decay) then
torch._foreach_add_(ema, params, alpha=1 - decay); phase 4 swaps the EMA in for evaluation
(backup = [p.detach().clone()], torch._foreach_copy_(params, ema)), evaluates 4 batches of 256 under
inference_mode and bf16 autocast (top-1 and top-5), and restores the trained weights by
torch._foreach_copy_(params, backup). Phases: the first step with the EMA's creation; 3 steps with
the lerp EMA; 3 steps with the warmup EMA; the swapped evaluation and restore: 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17803)
if SMALL:
    B, IMG, STEPS, EVAL_N, EVAL_B, KW = 2, 32, 2, 2, 2, dict(img_size=32, depth=2, embed_dim=48, num_heads=2)
else:
    B, IMG, STEPS, EVAL_N, EVAL_B, KW = 128, 224, 3, 4, 256, {}
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000, **KW).to(device)
model.train()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05, foreach=True)
data_gen = torch.Generator().manual_seed(17803)
print(f"params {sum(p.numel() for p in params)}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()


def train_step(step):
    images = torch.randn(B, 3, IMG, IMG, generator=data_gen).to(device, non_blocking=True)
    labels = torch.randint(0, 1000, (B,), generator=data_gen).to(device, non_blocking=True)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")


ema = [p.detach().clone() for p in params]
train_step(0)
with torch.no_grad():
    torch._foreach_lerp_(ema, params, 1 - 0.999)
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 1 + STEPS):
    train_step(step)
    with torch.no_grad():
        torch._foreach_lerp_(ema, params, 1 - 0.999)
if device == "cuda":
    print(f"lerp ema peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1 + STEPS, 1 + 2 * STEPS):
    train_step(step)
    decay = min(0.9998, (1 + step) / (10 + step))
    with torch.no_grad():
        torch._foreach_mul_(ema, decay)
        torch._foreach_add_(ema, [p.detach() for p in params], alpha=1 - decay)
if device == "cuda":
    print(f"warmup ema peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

backup = [p.detach().clone() for p in params]
with torch.no_grad():
    torch._foreach_copy_(params, ema)
model.eval()
top1 = torch.zeros((), device=device)
top5 = torch.zeros((), device=device)
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for _ in range(EVAL_N):
        images = torch.randn(EVAL_B, 3, IMG, IMG, generator=data_gen).to(device)
        labels = torch.randint(0, 1000, (EVAL_B,), generator=data_gen).to(device)
        logits = model(images)
        _, pred = logits.topk(5, dim=1)
        hit = pred.eq(labels[:, None])
        top1 += hit[:, 0].sum()
        top5 += hit.any(dim=1).sum()
with torch.no_grad():
    torch._foreach_copy_(params, backup)
del backup
print(f"ema top1 {top1.item() / (EVAL_N * EVAL_B):.4f} top5 {top5.item() / (EVAL_N * EVAL_B):.4f}")
if device == "cuda":
    print(f"swap eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
