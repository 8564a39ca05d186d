"""Multi-level feature distillation from a frozen ViT teacher into a truncated ViT student, as
dense-representation distillation codebases do it with timm's feature API. Teacher: timm 1.0.29's
`deit3_base_patch16_224` cast to fp16 (`.half()`, eval, no grad). Student: `deit3_small_patch16_224` (drop
path 0.1) cut by `prune_intermediate_layers(indices=[2, 5, 8], prune_head=True)` to its first 9 blocks and
no classifier. Both give patch tokens through `forward_intermediates(..., output_fmt="NLC",
intermediates_only=True)` (teacher blocks 3, 7, 11; student blocks 2, 5, 8); one `torchvision.ops.MLP(384,
[1024, 768], norm_layer=nn.LayerNorm, activation_layer=nn.GELU)` per level projects the student's tokens
onto the teacher's width, the loss is a smooth-L1 to the teacher's tokens after a parameter-free
`F.layer_norm` plus a cosine term.
Phase 1: the two models, the projectors, `AdamW(foreach=True)` over student + projectors, timm's
`ModelEmaV3(student, decay=0.999)` and a cosine schedule with linear warmup (`LambdaLR`).
Phase 2: teacher features alone for 128 images under `torch.no_grad()` (a warm-up pass, the features dropped).
Phase 3: 3 steps at 128 images, student under bf16 autocast, teacher in fp16, `clip_grad_norm_(1.0)`, EMA
update after each step (`ema.update(student, step=...)`).
Phase 4: the EMA student under `torch.inference_mode()` + bf16 autocast at 192 images, its last level compared
with the teacher's by cosine similarity, and `forward_intermediates(..., norm=True, output_fmt="NCHW")` maps
pooled.
4 phases."""

import math

import timm
import torch
import torch.nn.functional as F
from timm.utils import ModelEmaV3
from torch import nn
from torchvision.ops import MLP

torch.manual_seed(30802)
dev = "cuda"
T_IDX, S_IDX = [3, 7, 11], [2, 5, 8]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


teacher = timm.create_model("deit3_base_patch16_224").to(dev).half().eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model("deit3_small_patch16_224", drop_path_rate=0.1)
kept = student.prune_intermediate_layers(indices=S_IDX, prune_head=True)
print("student blocks", len(student.blocks), "kept", kept)
student = student.to(dev)
projectors = nn.ModuleList(
    MLP(384, [1024, 768], norm_layer=nn.LayerNorm, activation_layer=nn.GELU) for _ in S_IDX
).to(dev)
params = list(student.parameters()) + list(projectors.parameters())
optimizer = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.05, foreach=True)
total, warmup = 300, 20
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer,
    lambda it: (
        (it + 1) / warmup if it < warmup else 0.5 * (1 + math.cos(math.pi * (it - warmup) / (total - warmup)))
    ),
)
ema = ModelEmaV3(student, decay=0.999)
report("phase1 build")


def teacher_tokens(x):
    with torch.no_grad():
        feats = teacher.forward_intermediates(
            x.half(), indices=T_IDX, output_fmt="NLC", intermediates_only=True
        )
    return [F.layer_norm(f.float(), f.shape[-1:]) for f in feats]


x = torch.randn(128, 3, 224, 224, device=dev)
feats = teacher_tokens(x)
print("teacher levels", [tuple(f.shape) for f in feats])
del x, feats
report("phase2 teacher warm-up")

student.train()
for step in range(3):
    x = torch.randn(128, 3, 224, 224, device=dev)
    targets = teacher_tokens(x)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        s_feats = student.forward_intermediates(x, indices=S_IDX, output_fmt="NLC", intermediates_only=True)
        loss = 0.0
        for proj, s, t in zip(projectors, s_feats, targets, strict=True):
            pred = proj(s).float()
            loss = (
                loss + F.smooth_l1_loss(pred, t, beta=2.0) + (1 - F.cosine_similarity(pred, t, dim=-1)).mean()
            )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    ema.update(student, step=step)
    print(f"step {step} loss {loss.item():.4f}")
del x, targets, s_feats, pred, loss
report("phase3 distill")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(192, 3, 224, 224, device=dev)
    t_last = teacher.forward_intermediates(x.half(), indices=[11], output_fmt="NLC", intermediates_only=True)[
        0
    ]
    s_last = ema.module.forward_intermediates(x, indices=[8], output_fmt="NLC", intermediates_only=True)[0]
    sim = F.cosine_similarity(projectors[-1](s_last).float(), F.layer_norm(t_last.float(), (768,)), dim=-1)
    maps = ema.module.forward_intermediates(
        x, indices=S_IDX, norm=True, output_fmt="NCHW", intermediates_only=True
    )
    pooled = torch.cat([F.adaptive_avg_pool2d(m, 1).flatten(1) for m in maps], 1)
    print("ema cos", float(sim.mean()), "pooled", tuple(pooled.shape))
report("phase4 ema eval")
