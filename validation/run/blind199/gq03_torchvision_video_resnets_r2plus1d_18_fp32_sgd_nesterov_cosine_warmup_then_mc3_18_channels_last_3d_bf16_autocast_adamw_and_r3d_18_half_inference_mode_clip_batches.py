"""Kinetics-style training and evaluation of torchvision's video ResNets from their constructors (no weights).

1. r2plus1d_18(num_classes=400): (2+1)-D convolutions, BatchNorm3d, clips of 16 frames at 112 x 112
   (B, 3, 16, 112, 112), batch 16, fp32, SGD (momentum 0.9, nesterov, wd 1e-4) with a linear warmup then
   cosine lr through SequentialLR(LinearLR, CosineAnnealingLR); 1 + 2 steps.
2. mc3_18(num_classes=400) (mixed 3-D convolutions in the stem and first stage, 2-D after), model and clips in
   torch.channels_last_3d, bf16 autocast, AdamW (lr 1e-3, foreach default), batch 24 of 16 x 112 x 112,
   2 steps; the first model and its optimizer deleted and empty_cache() before it.
3. r3d_18(num_classes=400) converted with .half() and eval(), torch.inference_mode over 64 clips of
   16 x 112 x 112 in fp16, 32 clips per forward, softmax scores collected on the host.

Phases: r2plus1d set-up; first r2plus1d step; 2 more steps; mc3_18 channels_last_3d bf16 steps; r3d_18
fp16 inference. 5 phases."""

import gc
import os

import torch
import torch.nn.functional as F
from torchvision.models.video import mc3_18, r2plus1d_18, r3d_18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19903)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    T, S, B1, B2, N_EVAL, EVAL_B = 4, 32, 2, 2, 4, 2
else:
    T, S, B1, B2, N_EVAL, EVAL_B = 16, 112, 16, 24, 64, 32
N_CLASSES = 400


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


model = r2plus1d_18(num_classes=N_CLASSES).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True, weight_decay=1e-4)
warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=45)
sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
report("r2plus1d setup")


def step(m, o, clips, labels, bf16=False):
    m.train()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16 and amp):
        loss = F.cross_entropy(m(clips), labels)
    o.zero_grad(set_to_none=True)
    loss.backward()
    o.step()
    return loss


clips = torch.randn(B1, 3, T, S, S, device=device)
labels = torch.randint(0, N_CLASSES, (B1,), device=device)
loss = step(model, opt, clips, labels)
sched.step()
print(f"r2plus1d step 0 loss {loss.item():.4f}")
report("r2plus1d first step")
for _ in range(2):
    clips = torch.randn(B1, 3, T, S, S, device=device)
    labels = torch.randint(0, N_CLASSES, (B1,), device=device)
    loss = step(model, opt, clips, labels)
    sched.step()
print(f"r2plus1d step 2 loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.4f}")
report("r2plus1d train")

del model, opt, sched, warm, cos, clips, labels, loss
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()

model = mc3_18(num_classes=N_CLASSES).to(device, memory_format=torch.channels_last_3d)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for i in range(2):
    clips = torch.randn(B2, 3, T, S, S, device=device).contiguous(memory_format=torch.channels_last_3d)
    labels = torch.randint(0, N_CLASSES, (B2,), device=device)
    loss = step(model, opt, clips, labels, bf16=True)
    print(f"mc3_18 step {i} loss {loss.item():.4f}")
report("mc3_18 channels_last_3d bf16")
del model, opt, clips, labels, loss

model = r3d_18(num_classes=N_CLASSES).to(device).half().eval()
scores = []
with torch.inference_mode():
    for _ in range(0, N_EVAL, EVAL_B):
        clips = torch.randn(EVAL_B, 3, T, S, S, device=device, dtype=torch.half if amp else torch.float)
        if not amp:
            model.float()
        scores.append(model(clips).float().softmax(-1).cpu())
scores = torch.cat(scores)
print(f"r3d_18 scored {scores.shape[0]} clips, mean max prob {scores.max(-1).values.mean():.4f}")
if device == "cuda":
    print(f"r3d_18 inference peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
