"""DeiT-style distillation into a LeViT-256 (LevitForImageClassificationWithTeacher from a LevitConfig of
LeViT-256's shape: hidden sizes 256/384/512, heads 4/6/8, depths 4/4/4, key_dim 32, 1,000 classes, random
init; a 4-convolution stride-16 stem with BatchNorm and Hardswish, attention with learned per-head position
biases gathered by `attention_biases[:, attention_bias_idxs]`, a class head and a distillation head) from a
frozen timm `vit_small_patch16_224` teacher held in bf16 under `no_grad`, AdamW, bf16 autocast.

Hard distillation first (DeiT: half cross-entropy of the class head against the labels, half of the
distillation head against the teacher's argmax), then soft distillation (KL divergence of the distillation
head's log-softmax against the teacher's softmax at temperature 3, times T^2). LeViT's attention keeps its
gathered bias tensors in `attention_bias_cache` while in eval mode (one per device), and `train()` clears it,
so the evaluation's cached biases live until the model goes back to training.

Phases: 0 student, teacher and AdamW; 1 three hard-distillation steps at 128 x 224; 2 three soft-distillation
steps at 128; 3 `model.eval()` and two `inference_mode` batches of 256 (the head averaging both
classifiers), then `model.train()` (cache cleared). Seeded; no sizes depend on values."""

import os

import timm
import torch
import torch.nn.functional as F
from transformers import LevitConfig, LevitForImageClassificationWithTeacher

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3505)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = LevitConfig(
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 2, 2],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        num_labels=10,
    )
    teacher = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10, depth=2)
    B, B_EVAL, CLASSES = 4, 8, 10
else:
    config = LevitConfig(
        hidden_sizes=[256, 384, 512],
        num_attention_heads=[4, 6, 8],
        depths=[4, 4, 4],
        key_dim=[32, 32, 32],
        num_labels=1000,
    )
    teacher = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000)
    B, B_EVAL, CLASSES = 128, 256, 1000
T = 3.0


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


student = LevitForImageClassificationWithTeacher(config).to(device)
teacher = teacher.to(device, torch.bfloat16 if cuda else torch.float32).eval().requires_grad_(False)
opt = torch.optim.AdamW(student.parameters(), lr=5e-4, weight_decay=0.025)
n_student = sum(p.numel() for p in student.parameters())
n_teacher = sum(p.numel() for p in teacher.parameters())
print(f"student {n_student:,}, teacher {n_teacher:,}")
report("phase0 levit-256 student, bf16 vit-s teacher, adamw")


def batch(bs):
    x = torch.randn(bs, 3, 224, 224, device=device)
    return x, torch.randint(0, CLASSES, (bs,), device=device)


def step(bs, soft):
    x, y = batch(bs)
    with torch.no_grad():
        t_logits = teacher(x.to(next(teacher.parameters()).dtype)).float()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = student(pixel_values=x)
    cls_logits, dist_logits = out.cls_logits.float(), out.distillation_logits.float()
    if soft:
        dist = (
            F.kl_div(
                F.log_softmax(dist_logits / T, dim=-1), F.softmax(t_logits / T, dim=-1), reduction="batchmean"
            )
            * T
            * T
        )
    else:
        dist = F.cross_entropy(dist_logits, t_logits.argmax(dim=-1))
    loss = 0.5 * F.cross_entropy(cls_logits, y) + 0.5 * dist
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


student.train()
for i in range(3):
    print(f"hard distillation step {i} loss {step(B, False):.3f}")
report(f"phase1 three hard-distillation steps at {B}")

for i in range(3):
    print(f"soft distillation step {i} loss {step(B, True):.3f}")
report(f"phase2 three soft-distillation steps at {B}")

student.eval()
correct = 0
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    for _ in range(2):
        x, y = batch(B_EVAL)
        correct += (student(pixel_values=x).logits.argmax(-1) == y).sum().item()
print(f"eval accuracy {correct / (2 * B_EVAL):.4f}")
if cuda:
    print(f"allocated with the attention bias cache {torch.cuda.memory_allocated()}")
student.train()
if cuda:
    print(f"allocated after train() {torch.cuda.memory_allocated()}")
report(f"phase3 eval at {B_EVAL}, then train() clears the bias cache")
