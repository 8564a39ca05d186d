"""Knowledge distillation from a large timm teacher to a mobile student (100 classes at 224 px): the
teacher is a ConViT (`convit_base`: gated positional self-attention in its first ten blocks, a class
token joined late), cast to fp16 with `.half()`, frozen (`requires_grad_(False)`) and run under `torch.no_grad()`; the student is
an SHViT (`shvit_s2`: single-head attention over a channel split, conv stages, BN-linear head) trained with fp16
autocast and a `GradScaler`, SGD with Nesterov momentum and a step LR schedule; the loss is Hinton's
`alpha * T^2 * KL(log_softmax(s / T) || softmax(t / T)) + (1 - alpha) * CE` with T = 4, alpha = 0.7. The teacher's logits for each batch are computed on the fly. Then the teacher is deleted and
`torch.cuda.empty_cache()` called; the student is evaluated under inference_mode and its agreement with
the teacher's cached test predictions reported.

Phases: 0 models + data; 1 teacher test predictions; 2 distillation; 3 student eval after the teacher
is gone; 4 metrics."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3312)
device = "cuda" if torch.cuda.is_available() else "cpu"
N_CLASSES, T, ALPHA = 100, 4.0, 0.7
if SMALL:
    N_TEST, BS, STEPS, IMG = 8, 4, 2, 224
else:
    N_TEST, BS, STEPS, IMG = 128, 64, 6, 224


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


teacher = timm.create_model("convit_base", pretrained=False, num_classes=N_CLASSES)
teacher = teacher.half().to(device).eval().requires_grad_(False)
student = timm.create_model("shvit_s2", pretrained=False, num_classes=N_CLASSES).to(device)
test_x = torch.randn(N_TEST, 3, IMG, IMG)
report("models")

teacher_test = []
with torch.no_grad():
    for s in range(0, N_TEST, BS):
        teacher_test.append(teacher(test_x[s : s + BS].to(device).half()).float().argmax(-1))
teacher_test = torch.cat(teacher_test)
report("teacher_test")

optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
scaler = torch.amp.GradScaler("cuda" if device == "cuda" else "cpu")
student.train()
for step in range(STEPS):
    x = torch.randn(BS, 3, IMG, IMG, device=device)
    y = torch.randint(0, N_CLASSES, (BS,), device=device)
    with torch.no_grad():
        t_logits = teacher(x.half()).float()
    with torch.autocast(device_type=device, dtype=torch.float16):
        s_logits = student(x)
        kd = F.kl_div(
            F.log_softmax(s_logits.float() / T, dim=-1), F.softmax(t_logits / T, dim=-1), reduction="batchmean"
        )
        loss = ALPHA * T * T * kd + (1 - ALPHA) * F.cross_entropy(s_logits, y)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(student.parameters(), 10.0)
    scaler.step(optimizer)
    scaler.update()
    sched.step()
report("distill")

del teacher, t_logits
torch.cuda.empty_cache() if device == "cuda" else None
student.eval()
preds = []
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.float16):
    for s in range(0, N_TEST, BS * 2):
        preds.append(student(test_x[s : s + BS * 2].to(device)).float().softmax(-1))
preds = torch.cat(preds)
report("student_eval")

agree = (preds.argmax(-1) == teacher_test).float().mean()
top5 = (preds.topk(5, dim=-1).indices == teacher_test[:, None]).any(-1).float().mean()
print(f"loss {loss.item():.3f} scale {scaler.get_scale():.0f} agree {agree.item():.3f} top5 {top5.item():.3f}")
report("metrics")
