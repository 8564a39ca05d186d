"""Feature distillation with module hooks, written after FitNets and DeiT-style logit distillation:
timm's ViT-B/16 teacher (frozen, eval) and ViT-S/16 student at 224 x 224, batch 128, bf16 autocast.
Forward hooks on blocks 3, 7 and 11 of both keep their outputs (the teacher's under no_grad), linear
regressors map the student's 384-wide hints to 768 and an MSE hint loss joins cross-entropy and
KL distillation at temperature 4; full backward hooks on the student's 12 MLPs keep each
gradient-output norm as a CUDA tensor; the patch embedding's output keeps its gradient by
retain_grad for a saliency map after backward; fused AdamW over student and regressors, 2 steps;
then a linear-probe feature bank: forward hooks on all 12 student blocks keep the CLS tokens of
2 batches of 256 under inference_mode; 4 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14904)
B, EB, NCLS = (4, 4, 10) if SMALL else (128, 256, 1000)
RES = 224
HINTS = (3, 7, 11)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")

teacher = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=NCLS).to(device).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=NCLS, drop_path_rate=0.1)
student = student.to(device)
regressors = nn.ModuleList(nn.Linear(student.embed_dim, teacher.embed_dim) for _ in HINTS).to(device)
opt = torch.optim.AdamW(
    list(student.parameters()) + list(regressors.parameters()),
    lr=5e-4,
    weight_decay=0.05,
    fused=device == "cuda",
)

feats = {"t": {}, "s": {}}
grad_norms = {}
emb = {}


def keep(store, i):
    def hook(module, args, output):
        store[i] = output

    return hook


def keep_grad_norm(i):
    def hook(module, grad_input, grad_output):
        grad_norms[i] = grad_output[0].detach().float().norm()

    return hook


def keep_embedding(module, args, output):
    output.retain_grad()
    emb["x"] = output


handles = []
for i in HINTS:
    handles.append(teacher.blocks[i].register_forward_hook(keep(feats["t"], i)))
    handles.append(student.blocks[i].register_forward_hook(keep(feats["s"], i)))
for i, blk in enumerate(student.blocks):
    handles.append(blk.mlp.register_full_backward_hook(keep_grad_norm(i)))
handles.append(student.patch_embed.register_forward_hook(keep_embedding))
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.train()
for step in range(2):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(**amp):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        ce = F.cross_entropy(s_logits, y)
        kd = (
            F.kl_div(
                F.log_softmax(s_logits.float() / 4, -1),
                F.log_softmax(t_logits.float() / 4, -1),
                reduction="batchmean",
                log_target=True,
            )
            * 16
        )
        hint = sum(
            F.mse_loss(reg(feats["s"][i]), feats["t"][i]) for reg, i in zip(regressors, HINTS, strict=True)
        )
        loss = ce + kd + hint
    loss.backward()
    saliency = emb["x"].grad.float().norm(dim=-1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        norms = torch.stack([grad_norms[i] for i in range(len(student.blocks))])
        print(
            f"step {step} loss {loss.item():.4f} hint {hint.item():.4f}"
            f" mlp grad norms max {norms.max().item():.3e}"
            f" saliency {saliency.mean().item():.3e} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del loss, ce, kd, hint, s_logits, t_logits, saliency, x, y

for h in handles:
    h.remove()
feats["s"].clear()
feats["t"].clear()
emb.clear()
bank = {i: [] for i in range(len(student.blocks))}


def keep_cls(i):
    def hook(module, args, output):
        bank[i].append(output[:, 0].float())

    return hook


handles = [blk.register_forward_hook(keep_cls(i)) for i, blk in enumerate(student.blocks)]
student.eval()
with torch.inference_mode(), torch.autocast(**amp):
    for _ in range(2):
        student(torch.randn(EB, 3, RES, RES, device=device))
bank = {i: torch.cat(v) for i, v in bank.items()}
for h in handles:
    h.remove()
if device == "cuda":
    print(
        f"feature bank {len(bank)} x {tuple(bank[0].shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
