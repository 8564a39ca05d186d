"""Adversarial training of a small Vision Transformer on CIFAR-shaped inputs, after Mo et al. 2022
("When Adversarial Training Meets Vision Transformers") and Debenedetti et al. 2022 ("A Light Recipe
to Train Robust Vision Transformers"), both on timm: timm's VisionTransformer built from its
constructor (img 32, patch 4 -> 64 patches + a class token, embed 384, depth 12, 6 heads, MLP ratio
4, drop_path 0.1; ViT-S/4, 21.3 M parameters; timm's fused scaled_dot_product_attention) behind a
CIFAR mean/std normalization wrapper, random batches of 256. Each step: L-inf PGD-5 (eps 8/255, step
2/255, random start) with the model in eval() (no drop path) and the input gradient by
`torch.autograd.grad`, then train() and the update under bf16 autocast with label smoothing 0.1,
AdamW (lr 5e-4, weight decay 0.05, betas (0.9, 0.95)), linear warmup then cosine by LambdaLR,
`clip_grad_norm_(1.0)`; the first step its own phase, then 2 steps. Then clean evaluation of 2
batches of 1,024 under inference_mode with bf16 autocast; then a PGD-10 evaluation in fp32 (autocast
off, so the attention runs an fp32 kernel forward and backward) with the Carlini-Wagner margin loss
on a batch of 256; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17506)
if SMALL:
    B, DIM, DEPTH, HEADS, EVAL_B, PGD_B = 4, 48, 2, 3, 8, 4
else:
    B, DIM, DEPTH, HEADS, EVAL_B, PGD_B = 256, 384, 12, 6, 1024, 256
EPS, ALPHA = 8 / 255, 2 / 255
STEPS, WARMUP = 3, 1
device = "cuda" if torch.cuda.is_available() else "cpu"


class Normalized(nn.Module):
    def __init__(self, model, mean=(0.4914, 0.4822, 0.4465), std=(0.2471, 0.2435, 0.2616)):
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1))

    def forward(self, x):
        return self.model((x - self.mean) / self.std)


vit = VisionTransformer(
    img_size=32,
    patch_size=4,
    num_classes=10,
    embed_dim=DIM,
    depth=DEPTH,
    num_heads=HEADS,
    mlp_ratio=4.0,
    drop_path_rate=0.1,
)
model = Normalized(vit).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
decay = [
    p for n, p in model.named_parameters() if p.ndim > 1 and "pos_embed" not in n and "cls_token" not in n
]
no_decay = [
    p
    for n, p in model.named_parameters()
    if not (p.ndim > 1 and "pos_embed" not in n and "cls_token" not in n)
]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=5e-4,
    betas=(0.9, 0.95),
)


def lr_lambda(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    return 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / max(1, 100 - WARMUP)))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def cifar_batch(bs):
    return torch.rand(bs, 3, 32, 32, device=device), torch.randint(0, 10, (bs,), device=device)


def cw_loss(logits, y, kappa=50.0):
    onehot = F.one_hot(y, logits.size(1)).float()
    correct = (logits * onehot).sum(1)
    wrong = (logits - 1e4 * onehot).max(1)[0]
    return -torch.clamp(correct - wrong, min=-kappa).mean()


def pgd(model, x, y, eps, alpha, steps, loss_fn, autocast):
    training = model.training
    model.eval()
    delta = torch.zeros_like(x).uniform_(-eps, eps)
    delta = (x + delta).clamp(0, 1) - x
    for _ in range(steps):
        delta.requires_grad_(True)
        with torch.autocast(**autocast):
            loss = loss_fn(model(x + delta), y)
        (grad,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
        delta = (x + delta).clamp(0, 1) - x
    model.train(training)
    return (x + delta).detach()


model.train()
for step in range(STEPS):
    x, y = cifar_batch(B)
    x_adv = pgd(model, x, y, EPS, ALPHA, 5, F.cross_entropy, amp)
    with torch.autocast(**amp):
        logits = model(x_adv)
        loss = criterion(logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(
        f"step {step} loss {loss.item():.4f} grad norm {grad_norm.item():.3f}"
        f" lr {scheduler.get_last_lr()[0]:.2e}"
    )
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, x_adv, logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast(**amp):
    for _ in range(2):
        x, y = cifar_batch(EVAL_B)
        correct += (model(x).argmax(-1) == y).sum().item()
print(f"clean acc {correct / (2 * EVAL_B):.3f}")
if device == "cuda":
    print(f"clean peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

x, y = cifar_batch(PGD_B)
fp32 = dict(amp, enabled=False)
x_adv = pgd(model, x, y, EPS, ALPHA, 10, cw_loss, fp32)
with torch.no_grad():
    robust = (model(x_adv).argmax(-1) == y).float().mean()
print(f"pgd10-cw acc {robust.item():.3f}")
if device == "cuda":
    print(
        f"pgd allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
