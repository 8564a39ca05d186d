"""DeiT-style hard-label distillation (Touvron et al. 2021) of a torchvision CNN teacher into timm's
EfficientFormer, as EfficientFormer's training recipe distils it. Teacher: torchvision 0.26's
`convnext_base` (random init standing in for trained weights, 1,000 classes), cast to bf16, channels-last,
`eval()`, run under `torch.no_grad()`. Student: timm 1.0.29's `efficientformer_l1` (drop_path 0.1) with
`set_distilled_training(True)`, so that in train mode its forward returns the class head's and the
distillation head's logits separately. Loss: 0.5 x label-smoothed (0.1) cross-entropy of the class head
against the labels plus 0.5 x cross-entropy of the distillation head against the teacher's argmax. Phase 1:
building both models and timm's `NAdamW` (`create_optimizer_v2(student, "nadamw", lr=2e-3,
weight_decay=0.05)`, no decay on biases, norms and layer scales) with `StepLRScheduler` (decay 0.5 every 4
steps, warmup 2). Phase 2: 8 steps at 128 images of 224 x 224: the teacher's bf16 forward, then the student
under fp16 autocast with `torch.amp.GradScaler`, gradients unscaled and clipped at 5. Phase 3: the teacher
deleted and `torch.cuda.empty_cache()`, the student switched to `set_distilled_training(False)`, `eval()`
and `.half()` (heads averaged), evaluated under `torch.inference_mode()` on fp16 batches of 256 and 512
images, with the top-5 predictions moved to the host.
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import StepLRScheduler
from torchvision.models import convnext_base

torch.manual_seed(2905)
dev = "cuda"
B, NUM_CLASSES = 128, 1000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


teacher = convnext_base(weights=None).to(dev, dtype=torch.bfloat16, memory_format=torch.channels_last).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model(
    "efficientformer_l1", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1
)
student.set_distilled_training(True)
student = student.to(dev)
optimizer = create_optimizer_v2(student, "nadamw", lr=2e-3, weight_decay=0.05)
scheduler = StepLRScheduler(optimizer, decay_t=4, decay_rate=0.5, warmup_t=2, warmup_lr_init=1e-5)
scaler = torch.amp.GradScaler("cuda")
print(
    "teacher",
    sum(p.numel() for p in teacher.parameters()),
    "student",
    sum(p.numel() for p in student.parameters()),
)
report("convnext_base_teacher_efficientformer_l1_student_build")

mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)
student.train()
for step in range(8):
    x = (torch.rand(B, 3, 224, 224, device=dev) - mean) / std
    y = torch.randint(0, NUM_CLASSES, (B,), device=dev)
    with torch.no_grad():
        t_logits = teacher(x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last))
    with torch.autocast("cuda", dtype=torch.float16):
        out_cls, out_dist = student(x)
        loss = 0.5 * F.cross_entropy(out_cls, y, label_smoothing=0.1) + 0.5 * F.cross_entropy(
            out_dist, t_logits.argmax(-1)
        )
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(student.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step(step + 1)
print("distill loss", round(loss.item(), 3))
report("hard_distillation_fp16_gradscaler_nadamw")

del teacher, t_logits, x, y, out_cls, out_dist, loss
torch.cuda.empty_cache()
student.set_distilled_training(False)
student = student.eval().half()
top5 = []
with torch.inference_mode():
    for bs in (256, 512):
        x = ((torch.rand(bs, 3, 224, 224, device=dev) - mean) / std).half()
        top5.append(student(x).topk(5, dim=-1).indices.cpu())
print("eval", sum(t.shape[0] for t in top5))
report("student_half_inference_mode_after_empty_cache")
