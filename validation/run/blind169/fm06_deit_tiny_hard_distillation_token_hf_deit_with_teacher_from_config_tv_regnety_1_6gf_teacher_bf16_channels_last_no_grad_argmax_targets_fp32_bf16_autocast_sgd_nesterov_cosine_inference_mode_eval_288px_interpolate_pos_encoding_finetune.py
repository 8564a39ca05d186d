"""DeiT hard-label distillation through the distillation token (facebookresearch/deit, losses.py's
DistillationLoss with distillation_type="hard"), over Hugging Face's DeiTForImageClassificationWithTeacher
built from config (DeiT-Tiny: 12 layers, 192 wide, 3 heads, MLP 768, patch 16 at 224 px, 1,000
classes; sdpa attention; a class and a distillation token with their two heads), the teacher
torchvision's RegNetY-1.6GF (weights=None, as DeiT's RegNetY-16GF teacher but smaller) cast to bf16,
channels_last, frozen in eval, its forward under no_grad: loss = 0.5 CE(cls_logits, labels with
label smoothing 0.1) + 0.5 CE(distillation_logits, teacher_logits.argmax(1)). The student fp32
under bf16 autocast, SGD (lr 0.05, momentum 0.9, nesterov, weight decay 5e-5) with a cosine
schedule, batches of 128 x 3 x 224 x 224. Phases: the models built, the first step, three more, an
evaluation under inference_mode in bf16 autocast over 2 batches of 256 (DeiT's inference averages
the two heads), then the teacher freed and the student fine-tuned at 288 px for 2 steps of 64 with
`interpolate_pos_encoding=True` (cross-entropy on both heads); 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16906)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = "cuda" if device == "cuda" else "cpu"
if SMALL:
    CFG = dict(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=96,
        image_size=64,
        patch_size=16,
    )
    B, RES, HI_RES, HI_B, EVAL_B, NCLS, STEPS = 4, 64, 96, 2, 8, 10, 3
else:
    CFG = dict(
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        image_size=224,
        patch_size=16,
    )
    B, RES, HI_RES, HI_B, EVAL_B, NCLS, STEPS = 128, 224, 288, 64, 256, 1000, 4

student = DeiTForImageClassificationWithTeacher(DeiTConfig(num_labels=NCLS, **CFG)).to(device)
teacher = torchvision.models.regnet_y_1_6gf(weights=None, num_classes=NCLS)
teacher = teacher.to(device, dtype=torch.bfloat16, memory_format=torch.channels_last).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS + 2)
gen = torch.Generator().manual_seed(16906)
n_teacher = sum(p.numel() for p in teacher.parameters())
print(f"student {sum(p.numel() for p in student.parameters())} teacher {n_teacher}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def images(n, res):
    x = torch.randn(n, 3, res, res, generator=gen)
    y = torch.randint(0, NCLS, (n,), generator=gen)
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


student.train()
for step in range(STEPS):
    x, y = images(B, RES)
    with torch.no_grad():
        t_logits = teacher(x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last))
    with torch.autocast(amp, dtype=torch.bfloat16):
        out = student(pixel_values=x)
        base_loss = F.cross_entropy(out.cls_logits, y, label_smoothing=0.1)
        distillation_loss = F.cross_entropy(out.distillation_logits, t_logits.argmax(dim=1))
        loss = 0.5 * base_loss + 0.5 * distillation_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f}")
    del out, loss, base_loss, distillation_loss, t_logits
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

student.eval()
correct = agree = 0
with torch.inference_mode(), torch.autocast(amp, dtype=torch.bfloat16):
    for _ in range(2):
        x, y = images(EVAL_B, RES)
        logits = student(pixel_values=x).logits
        t_pred = teacher(x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)).argmax(1)
        correct += (logits.argmax(1) == y).sum().item()
        agree += (logits.argmax(1) == t_pred).sum().item()
print(f"eval accuracy {correct / (2 * EVAL_B):.4f} teacher agreement {agree / (2 * EVAL_B):.4f}")
del logits, t_pred, x, y
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del teacher
student.train()
for step in range(2):
    x, y = images(HI_B, HI_RES)
    with torch.autocast(amp, dtype=torch.bfloat16):
        out = student(pixel_values=x, interpolate_pos_encoding=True)
        loss = 0.5 * F.cross_entropy(out.cls_logits, y) + 0.5 * F.cross_entropy(out.distillation_logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"{HI_RES} px step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"finetune allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
