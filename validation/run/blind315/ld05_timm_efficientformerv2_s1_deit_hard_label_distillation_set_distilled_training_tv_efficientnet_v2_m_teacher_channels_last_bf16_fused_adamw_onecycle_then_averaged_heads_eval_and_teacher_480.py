"""DeiT-style hard-label distillation into timm's EfficientFormerV2-S1 (4D conv stages then two
attention stages, a classifier head and a distillation head): ``set_distilled_training(True)`` makes
the training forward return (class logits, distillation logits); the loss is half cross-entropy with
the labels (label smoothing 0.1) plus half cross-entropy of the distillation head with the teacher's
argmax. The teacher is torchvision's EfficientNetV2-M (random init, eval mode, channels-last, bf16
autocast under inference_mode), the student trains channels-last under bf16 autocast with fused AdamW
and OneCycleLR.

Phases: 0 teacher and student; 1 four distillation steps of batch 64 at 224 (teacher labels then
student step); 2 student eval (the two heads averaged) of batch 256 under no_grad; 3 agreement of
student and teacher on batch 64 under inference_mode; 4 the teacher alone at its native 480 x 480,
batch 16, under inference_mode."""

import timm
import torch
import torch.nn.functional as F
import torchvision

torch.manual_seed(3155)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 1000
B, R = 64, 224


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


teacher = torchvision.models.efficientnet_v2_m(weights=None, num_classes=NUM_CLASSES)
teacher = teacher.to(device, memory_format=torch.channels_last).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model(
    "efficientformerv2_s1", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1
)
student = student.to(device, memory_format=torch.channels_last)
student.set_distilled_training(True)
opt = torch.optim.AdamW(student.parameters(), lr=1e-3, weight_decay=0.025, fused=True)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=10, pct_start=0.3)
report("models")

student.train()
for step in range(4):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NUM_CLASSES, (B,), device=device)
    with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
        teacher_label = teacher(x).argmax(-1)
    teacher_label = teacher_label.clone()
    with torch.autocast(device, dtype=torch.bfloat16):
        logits, logits_dist = student(x)
    loss = 0.5 * F.cross_entropy(logits.float(), y, label_smoothing=0.1) + 0.5 * F.cross_entropy(
        logits_dist.float(), teacher_label
    )
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.6f}")
    del x, y, teacher_label, logits, logits_dist, loss
report("distill")

student.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(256, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    out = student(x)
    top1 = out.argmax(-1)
if device == "cuda":
    print(f"eval {tuple(out.shape)} distinct {top1.unique().numel()}")
del x, out, top1
report("student_eval")

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    agree = (student(x).argmax(-1) == teacher(x).argmax(-1)).float().mean()
if device == "cuda":
    print(f"agreement {agree.item():.4f}")
del x, agree
report("agreement")

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(16, 3, 480, 480, device=device).contiguous(memory_format=torch.channels_last)
    probs = teacher(x).float().softmax(-1)
if device == "cuda":
    print(f"teacher480 max prob {probs.max().item():.4f}")
report("teacher480")
