"""DeiT-style hard-label distillation into timm's PiT-S (pooling-based vision transformer: tokens are
reshaped to a grid and downsampled by a depthwise strided convolution between stages, with a class
and a distillation token) from a timm RegNetX-1.6GF teacher kept frozen in fp16 and channels_last.
``set_distilled_training(True)`` makes the student return (class logits, distillation logits); the
loss is half cross-entropy on the labels and half cross-entropy on the teacher's argmax. bf16
autocast, AdamW with decay off for 1-d parameters.

Phases: 0 student, teacher and optimizer; 1 four distillation steps of batch 64 at 224; 2 the teacher
freed and ``empty_cache``, eval mode (the two heads averaged) on batch 128 under no_grad; 3 the
classifier reset to 37 classes with ``reset_classifier``, the backbone frozen (requires_grad False),
a new AdamW on the heads only and three linear-probe steps of batch 96; 4 the probe evaluated on batch
200 in bf16 with per-class accuracy by ``bincount``."""

import timm
import torch
import torch.nn.functional as F

torch.manual_seed(3243)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES, PROBE_CLASSES = 400, 37


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def param_groups(module, wd):
    decay, no_decay = [], []
    for p in module.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


student = timm.create_model(
    "pit_s_distilled_224", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1
)
student = student.to(device)
student.set_distilled_training(True)
teacher = timm.create_model("regnetx_016", pretrained=False, num_classes=NUM_CLASSES)
teacher = teacher.to(device).half().to(memory_format=torch.channels_last).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(param_groups(student, 0.05), lr=5e-4)
report("models")

student.train()
for step in range(4):
    x = torch.randn(64, 3, 224, 224, device=device)
    y = torch.randint(0, NUM_CLASSES, (64,), device=device)
    with torch.no_grad():
        t_label = teacher(x.half().contiguous(memory_format=torch.channels_last)).argmax(-1)
    with torch.autocast(device, dtype=torch.bfloat16):
        cls_logits, dist_logits = student(x)
        loss = 0.5 * F.cross_entropy(cls_logits, y) + 0.5 * F.cross_entropy(dist_logits, t_label)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f}")
del x, y, t_label, cls_logits, dist_logits, loss
report("distill")

del teacher
torch.cuda.empty_cache()
student.set_distilled_training(False)
student.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    preds = student(torch.randn(128, 3, 224, 224, device=device)).argmax(-1)
if device == "cuda":
    print(f"eval classes seen {preds.unique().numel()}")
report("eval_avg_heads")

student.reset_classifier(PROBE_CLASSES)
student.to(device)
for name, p in student.named_parameters():
    p.requires_grad_(name.startswith("head"))
del opt
probe_opt = torch.optim.AdamW(param_groups(student, 0.0), lr=1e-3)
student.train()
student.set_distilled_training(True)
for _step in range(3):
    x = torch.randn(96, 3, 224, 224, device=device)
    y = torch.randint(0, PROBE_CLASSES, (96,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        a, b = student(x)
        loss = F.cross_entropy(a, y) + F.cross_entropy(b, y)
    probe_opt.zero_grad(set_to_none=True)
    loss.backward()
    probe_opt.step()
del x, y, a, b, loss
report("linear_probe")

student.set_distilled_training(False)
student.eval()
y = torch.randint(0, PROBE_CLASSES, (200,), device=device)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    pred = student(torch.randn(200, 3, 224, 224, device=device)).argmax(-1)
correct = torch.bincount(y[pred == y], minlength=PROBE_CLASSES)
total = torch.bincount(y, minlength=PROBE_CLASSES)
per_class = correct.float() / total.clamp(min=1)
if device == "cuda":
    print(f"probe mean per-class acc {per_class.mean().item():.4f}")
report("probe_eval")
