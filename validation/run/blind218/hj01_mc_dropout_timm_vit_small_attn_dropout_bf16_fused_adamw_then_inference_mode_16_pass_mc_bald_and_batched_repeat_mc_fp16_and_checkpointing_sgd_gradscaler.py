"""Monte Carlo dropout (Gal & Ghahramani 2016) on a timm ViT-S/16 (random init, 100 classes).

The ViT has dropout after the patch embedding and in every projection/MLP (0.1) and attention dropout
(0.1, passed to SDPA as dropout_p while training). MC dropout keeps dropout on at test time and averages
T stochastic forward passes: the predictive mean, its entropy, the expected entropy and their difference
(BALD mutual information) score each input's uncertainty.

Phases: 4 steps of training under bf16 autocast with fused AdamW at batch 128; MC dropout inference under
inference_mode with 16 sequential stochastic passes at batch 512 (model.train() so SDPA keeps its dropout);
batched MC dropout, the batch repeated 16 times along the batch dimension (x.repeat) and one fp16-autocast
forward for all passes at batch 64 (1,024 images); then fine-tuning with timm's gradient checkpointing under fp16
autocast with GradScaler and SGD momentum at batch 256. 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2181)
device = "cuda" if torch.cuda.is_available() else "cpu"
CLASSES = 100
IMG = 64 if SMALL else 224
B_TRAIN, B_MC, B_REP, B_CKPT = (4, 4, 2, 4) if SMALL else (128, 512, 64, 256)
T_MC, T_REP = (3, 2) if SMALL else (16, 16)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = timm.create_model(
    "vit_small_patch16_224",
    pretrained=False,
    num_classes=CLASSES,
    img_size=IMG,
    drop_rate=0.1,
    proj_drop_rate=0.1,
    attn_drop_rate=0.1,
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, fused=device == "cuda")

model.train()
for step in range(4):
    x = torch.randn(B_TRAIN, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_TRAIN,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"train loss {loss.item():.4f}")
report("train bf16 fused adamw")


def entropy(p):
    return -(p * p.clamp_min(1e-12).log()).sum(-1)


# MC dropout: T sequential stochastic passes, dropout (and attention dropout) kept on
model.train()
with torch.inference_mode():
    x = torch.randn(B_MC, 3, IMG, IMG, device=device)
    probs_sum = torch.zeros(B_MC, CLASSES, device=device)
    exp_entropy = torch.zeros(B_MC, device=device)
    for t in range(T_MC):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(x)
        p = logits.float().softmax(-1)
        probs_sum += p
        exp_entropy += entropy(p)
    mean_p = probs_sum / T_MC
    pred_entropy = entropy(mean_p)
    bald = pred_entropy - exp_entropy / T_MC
    print(f"mc dropout entropy {pred_entropy.mean().item():.4f} bald {bald.mean().item():.5f}")
report("mc dropout 16 sequential passes inference_mode")

# batched MC dropout: all passes in one forward by repeating the batch
with torch.inference_mode():
    x = torch.randn(B_REP, 3, IMG, IMG, device=device)
    xr = x.repeat(T_REP, 1, 1, 1)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits = model(xr)
    p = logits.float().softmax(-1).view(T_REP, B_REP, CLASSES)
    mean_p = p.mean(0)
    bald = entropy(mean_p) - entropy(p).mean(0)
    var_ratio = 1 - p.argmax(-1).mode(0).values.eq(mean_p.argmax(-1)).float().mean()
    print(f"batched mc bald {bald.mean().item():.5f} variation ratio {var_ratio.item():.4f}")
    del xr, logits, p
report("batched repeat mc dropout fp16")

# fine-tune with gradient checkpointing, fp16 autocast with GradScaler, SGD momentum
del opt
model.set_grad_checkpointing(True)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
for step in range(3):
    x = torch.randn(B_CKPT, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_CKPT,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
print(f"ckpt loss {loss.item():.4f} scale {scaler.get_scale() if device == 'cuda' else 1.0}")
report("checkpointing fp16 gradscaler sgd")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
