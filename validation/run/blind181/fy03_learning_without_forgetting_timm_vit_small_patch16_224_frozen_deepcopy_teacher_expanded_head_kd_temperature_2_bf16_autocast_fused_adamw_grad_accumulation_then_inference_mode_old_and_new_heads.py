"""Learning without Forgetting (Li & Hoiem 2016) on a timm vit_small_patch16_224 (random init,
pretrained=False; timm's fused SDPA attention), as a class-incremental practitioner writes it: task
1 trains the model on 50 classes under bf16 autocast with fused AdamW (lr 5e-4, weight decay 0.05)
at batch 96, the first step its own phase then 3 steps. Then the old model is frozen as a teacher by
copy.deepcopy (eval, requires_grad_(False)) and the student's head is expanded to 100 classes (a new
nn.Linear(384, 100) with the old 50 rows copied in; a new fused AdamW over the student). Task 2: the
loss is the cross-entropy of the new classes plus the distillation term T^2 * KL(log_softmax(student
old-class logits / T) || softmax(teacher logits / T)) with T = 2, the teacher's forward under
torch.no_grad; gradient accumulation of 2 micro-batches of 96 per step, clip_grad_norm_(1.0); the
first step its own phase then 3 more. Then evaluation of old and new models on both halves of the
classes under torch.inference_mode at batch 256; 5 phases."""

import copy
import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18103)
if SMALL:
    MODEL, B, RES, STEPS1, STEPS2, EVAL_B = "vit_tiny_patch16_224", 2, 64, 2, 2, 4
else:
    MODEL, B, RES, STEPS1, STEPS2, EVAL_B = "vit_small_patch16_224", 96, 224, 4, 4, 256
OLD, TOTAL = 50, 100
ACCUM, T = 2, 2.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def batch(lo, hi, bs):
    return torch.randn(bs, 3, RES, RES, device=device), torch.randint(lo, hi, (bs,), device=device)


model = timm.create_model(MODEL, pretrained=False, num_classes=OLD, img_size=RES).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

# ---- task 1
model.train()
for step in range(STEPS1):
    x, y = batch(0, OLD, B)
    with torch.autocast(**amp):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"task 1 step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, loss
if device == "cuda":
    print(f"task 1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- freeze the teacher, expand the head
teacher = copy.deepcopy(model).eval().requires_grad_(False)
old_head = model.head
new_head = nn.Linear(old_head.in_features, TOTAL).to(device)
with torch.no_grad():
    new_head.weight[:OLD].copy_(old_head.weight)
    new_head.bias[:OLD].copy_(old_head.bias)
model.head = new_head
model.num_classes = TOTAL
del optimizer, old_head
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05, fused=device == "cuda")


def lwf_step():
    optimizer.zero_grad(set_to_none=True)
    for _ in range(ACCUM):
        x, y = batch(OLD, TOTAL, B)
        with torch.no_grad(), torch.autocast(**amp):
            old_logits = teacher(x)
        with torch.autocast(**amp):
            logits = model(x)
        ce = F.cross_entropy(logits, y)
        kd = F.kl_div(
            F.log_softmax(logits[:, :OLD].float() / T, dim=1),
            F.softmax(old_logits.float() / T, dim=1),
            reduction="batchmean",
        ) * (T * T)
        loss = (ce + kd) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return ce.item(), kd.item()


model.train()
ce, kd = lwf_step()
print(f"lwf first step ce {ce:.4f} kd {kd:.4f}")
if device == "cuda":
    print(f"lwf first step peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(1, STEPS2):
    ce, kd = lwf_step()
    print(f"lwf step {step} ce {ce:.4f} kd {kd:.4f}")
if device == "cuda":
    print(f"lwf peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- evaluation: old classes with teacher and student, new classes with the student
model.eval()
with torch.inference_mode(), torch.autocast(**amp):
    x, y = batch(0, OLD, EVAL_B)
    acc_teacher = (teacher(x).argmax(1) == y).float().mean().item()
    acc_old = (model(x).argmax(1) == y).float().mean().item()
    x, y = batch(OLD, TOTAL, EVAL_B)
    acc_new = (model(x).argmax(1) == y).float().mean().item()
print(f"teacher old {acc_teacher:.3f} student old {acc_old:.3f} student new {acc_new:.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
