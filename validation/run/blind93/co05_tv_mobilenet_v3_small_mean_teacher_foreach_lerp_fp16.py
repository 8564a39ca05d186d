"""Mean-teacher semi-supervised training (Tarvainen & Valpola 2017) of torchvision MobileNetV3-Small
(no pretrained weights, 100 classes) at 224 x 224: a student trained under fp16 autocast with a
GradScaler and SGD (Nesterov), on a labelled batch of 32 plus an unlabelled batch of 96 seen by
student and teacher with independent Gaussian input noise drawn on the GPU; the consistency loss is
the MSE of their softmax outputs; the teacher is an EMA copy updated with torch._foreach_lerp_
(decay 0.99) over parameters and buffers after each step; 3 steps, then the teacher evaluates a
batch of 256 under no_grad; 5 phases."""

import copy
import os

import torch
import torch.nn.functional as F
from torchvision import models

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9305)
BL, BU, EB, R = (2, 2, 4, 64) if SMALL else (32, 96, 256, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
student = models.mobilenet_v3_small(weights=None, num_classes=100).to(device)
teacher = copy.deepcopy(student)
for p in teacher.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
s_params = list(student.parameters())
t_params = list(teacher.parameters())
s_bufs = [b for b in student.buffers() if b.is_floating_point()]
t_bufs = [b for b in teacher.buffers() if b.is_floating_point()]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
student.train()
teacher.train()
for step in range(3):
    xl = torch.randn(BL, 3, R, R, device=device)
    yl = torch.randint(0, 100, (BL,), device=device)
    xu = torch.randn(BU, 3, R, R, device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logits = student(torch.cat([xl, xu + 0.1 * torch.randn_like(xu)]))
        with torch.no_grad():
            t_logits = teacher(xu + 0.1 * torch.randn_like(xu))
    sup = F.cross_entropy(logits[:BL].float(), yl)
    cons = F.mse_loss(logits[BL:].float().softmax(-1), t_logits.float().softmax(-1))
    loss = sup + 10.0 * cons
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(t_params, s_params, 0.01)
        torch._foreach_lerp_(t_bufs, s_bufs, 0.01)
    if device == "cuda":
        print(
            f"step {step} sup {sup.item():.3f} cons {cons.item():.5f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del xl, yl, xu, logits, t_logits, sup, cons, loss
teacher.eval()
with torch.no_grad():
    pred = teacher(torch.randn(EB, 3, R, R, device=device)).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
