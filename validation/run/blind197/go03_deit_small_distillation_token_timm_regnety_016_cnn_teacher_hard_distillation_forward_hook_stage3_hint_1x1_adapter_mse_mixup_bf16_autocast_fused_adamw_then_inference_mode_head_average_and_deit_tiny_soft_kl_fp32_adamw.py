"""DeiT (Touvron et al. 2021) hard-label distillation through a distillation token, with a FitNets-style
feature hint on top, using timm models built from scratch (no pretrained weights).

Teacher: timm regnety_016 (1,000 classes; a CNN teacher as in DeiT), channels_last, frozen, eval mode,
called under torch.no_grad inside bf16 autocast; a forward hook on its stage s3 (336 channels at stride
16, 14 x 14) keeps that stage's output. Student: timm deit_small_distilled_patch16_224 with
set_distilled_training(True), so training returns the class-token and distillation-token logits. Data:
batch 128 x 3 x 224 x 224 on the device, mixup by hand (lambda from a host-side Beta(0.8, 0.8), the
batch rolled by one) with soft one-hot targets smoothed by 0.1. Loss: 0.5 * soft-target CE on the class
head + 0.5 * CE of the distillation head against the teacher's argmax (hard distillation) + 0.5 * MSE
between the student's 196 patch tokens (reshaped to 384 x 14 x 14 and mapped by a trainable 1 x 1
conv + BatchNorm adapter to 336 channels) and the hooked teacher feature. bf16 autocast, fused AdamW
(lr 5e-4 * B / 512, weight decay 0.05 except norms, biases, tokens and position embeddings) over the
student and the adapter, clip_grad_norm_ 1.0.

Phases: the first step; 3 more steps; evaluation of 4 batches of 256 under torch.inference_mode (the
student's eval forward averages both heads) with the teacher's top-1 agreement; then soft distillation
(KL at T = 3 on the distillation head, CE on the class head) of a deit_tiny_distilled_patch16_224
student in fp32 with foreach=False AdamW for 3 steps at batch 128 (teacher logits in fp32 under
no_grad). 4 phases."""

import os

import numpy as np
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19703)
np.random.seed(19703)
if SMALL:
    B, EVAL_B, STEPS, EVAL_N = 4, 4, 1, 1
else:
    B, EVAL_B, STEPS, EVAL_N = 128, 256, 3, 4
NUM_CLASSES = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

teacher = timm.create_model("regnety_016", num_classes=NUM_CLASSES).to(
    device, memory_format=torch.channels_last
)
teacher.eval().requires_grad_(False)
feats = {}
teacher.s3.register_forward_hook(lambda m, i, o: feats.__setitem__("s3", o))

student = timm.create_model("deit_small_distilled_patch16_224", num_classes=NUM_CLASSES).to(device)
student.set_distilled_training(True)
adapter = nn.Sequential(nn.Conv2d(384, 336, 1, bias=False), nn.BatchNorm2d(336)).to(device)

decay, no_decay = [], []
for name, p in list(student.named_parameters()) + list(adapter.named_parameters()):
    (no_decay if p.ndim <= 1 or name in ("cls_token", "dist_token", "pos_embed") else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=5e-4 * B / 512,
    fused=amp,
)
print(
    f"teacher params {sum(p.numel() for p in teacher.parameters())} "
    f"student params {sum(p.numel() for p in student.parameters())}"
)


def mixup_batch(n):
    x = torch.randn(n, 3, 224, 224, device=device)
    y = torch.randint(0, NUM_CLASSES, (n,), device=device)
    lam = float(np.random.beta(0.8, 0.8))
    x = lam * x + (1 - lam) * x.roll(1, 0)
    off, on = 0.1 / NUM_CLASSES, 1 - 0.1 + 0.1 / NUM_CLASSES
    y1 = torch.full((n, NUM_CLASSES), off, device=device).scatter_(1, y[:, None], on)
    target = lam * y1 + (1 - lam) * y1.roll(1, 0)
    return x, target


def step():
    x, target = mixup_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            t_logits = teacher(x.contiguous(memory_format=torch.channels_last))
        t_feat = feats.pop("s3")
        tokens = student.forward_features(x)
        cls_logits, dist_logits = student.forward_head(tokens)
        patches = tokens[:, student.num_prefix_tokens :].transpose(1, 2).reshape(x.shape[0], 384, 14, 14)
        hint = adapter(patches)
        loss_cls = torch.sum(-target * F.log_softmax(cls_logits.float(), -1), -1).mean()
        loss_dist = F.cross_entropy(dist_logits.float(), t_logits.argmax(-1))
        loss_hint = F.mse_loss(hint.float(), t_feat.float())
        loss = 0.5 * loss_cls + 0.5 * loss_dist + 0.5 * loss_hint
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(decay + no_decay, 1.0)
    opt.step()
    return loss.item()


student.train()
adapter.train()
print(f"step 0 loss {step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.eval()
agree, n = 0, 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(EVAL_N):
        x = torch.randn(EVAL_B, 3, 224, 224, device=device)
        s_pred = student(x).argmax(-1)
        t_pred = teacher(x.contiguous(memory_format=torch.channels_last)).argmax(-1)
        feats.clear()
        agree += (s_pred == t_pred).sum().item()
        n += EVAL_B
print(f"eval teacher agreement {agree / n:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt = student = adapter = None
tiny = timm.create_model("deit_tiny_distilled_patch16_224", num_classes=NUM_CLASSES).to(device)
tiny.set_distilled_training(True)
tiny.train()
t_opt = torch.optim.AdamW(tiny.parameters(), lr=5e-4 * B / 512, weight_decay=0.05, foreach=False)
TAU = 3.0
for i in range(3):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, NUM_CLASSES, (B,), device=device)
    with torch.no_grad():
        t_logits = teacher(x.contiguous(memory_format=torch.channels_last))
    feats.clear()
    cls_logits, dist_logits = tiny(x)
    soft = (
        F.kl_div(
            F.log_softmax(dist_logits / TAU, -1),
            F.log_softmax(t_logits / TAU, -1),
            reduction="sum",
            log_target=True,
        )
        * (TAU * TAU)
        / dist_logits.numel()
    )
    loss = 0.5 * F.cross_entropy(cls_logits, y) + 0.5 * soft
    t_opt.zero_grad(set_to_none=True)
    loss.backward()
    t_opt.step()
    print(f"deit-tiny soft step {i} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"deit-tiny allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
