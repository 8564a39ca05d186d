"""Self-distillation as DINO trains a ViT: an HF Dinov2Model student (ViT-S/14: 384 wide, 12 layers,
6 heads) and an EMA teacher copy, two global 224 px crops through both (teacher under no_grad), a
projection head to 4096 prototypes, the cross-entropy between the teacher's centred, sharpened
softmax and the student's log-softmax, the teacher updated by torch._foreach_mul_/_foreach_add_
after each step; bf16 autocast, AdamW (foreach), batch 64, 2 steps; 3 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Dinov2Config, Dinov2Model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3505)
if SMALL:
    config = Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=28, patch_size=14
    )
    B, R, K = 2, 28, 64
else:
    config = Dinov2Config(
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, image_size=224, patch_size=14
    )
    B, R, K = 64, 224, 4096
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Dinov2Model(config)
        self.head = nn.Sequential(
            nn.Linear(config.hidden_size, 2048),
            nn.GELU(),
            nn.Linear(2048, 256),
            nn.Linear(256, K, bias=False),
        )

    def forward(self, x):
        return self.head(self.backbone(pixel_values=x).pooler_output)


student = Student().to(device)
teacher = copy.deepcopy(student).requires_grad_(False)
center = torch.zeros(1, K, device=device)
optimizer = torch.optim.AdamW(student.parameters(), lr=5e-4, weight_decay=0.04)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    views = [torch.randn(B, 3, R, R, device=device) for _ in range(2)]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        with torch.no_grad():
            t_out = [teacher(v) for v in views]
        s_out = [student(v) for v in views]
        t_prob = [F.softmax((t - center) / 0.04, dim=-1) for t in t_out]
        loss = (
            sum(
                torch.sum(-t_prob[i] * F.log_softmax(s_out[j] / 0.1, dim=-1), dim=-1).mean()
                for i in range(2)
                for j in range(2)
                if i != j
            )
            / 2
        )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        sp, tp = list(student.parameters()), list(teacher.parameters())
        torch._foreach_mul_(tp, 0.996)
        torch._foreach_add_(tp, sp, alpha=0.004)
        center.mul_(0.9).add_(torch.cat(t_out).float().mean(0, keepdim=True), alpha=0.1)
    del views, t_out, s_out, t_prob, loss, sp, tp
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
