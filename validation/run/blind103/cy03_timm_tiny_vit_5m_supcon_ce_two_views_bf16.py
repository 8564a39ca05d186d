"""timm TinyViT-5M (MBConv stages then windowed attention with attention biases) trained from
scratch on 100 classes under bf16 autocast with two GPU-augmented views per image (random flips
by a per-sample mask, brightness jitter, Gaussian noise): supervised contrastive loss (SupCon,
temperature 0.1) over a 2-layer projection of the pooled features of both views plus cross entropy
of the classifier head on them; batch 64 images (128 views) at 224 x 224, AdamW with a separate
parameter group (no weight decay) for norms and biases, 3 steps; then features of 256 images under
inference_mode and a kNN top-5 against the training batch's features; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10303)
B, BE, R, NCLS = (4, 8, 64, 10) if SMALL else (64, 256, 224, 100)
TAU = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("tiny_vit_5m_224", num_classes=NCLS).to(device)
dim = model.num_features
proj = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(inplace=True), nn.Linear(dim, 128)).to(device)
decay, no_decay = [], []
for m in (model, proj):
    for p in m.parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
)


def augment(x):
    flip = torch.rand(x.shape[0], 1, 1, 1, device=x.device) < 0.5
    x = torch.where(flip, x.flip(-1), x)
    x = x * (0.8 + 0.4 * torch.rand(x.shape[0], 1, 1, 1, device=x.device))
    return x + 0.05 * torch.randn_like(x)


def supcon(z, labels):
    z = F.normalize(z.float(), dim=-1)
    sim = z @ z.T / TAU
    n = z.shape[0]
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    sim = sim.masked_fill(self_mask, -1e9)
    pos = (labels[:, None] == labels[None, :]) & ~self_mask
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    return -((log_prob * pos).sum(1) / pos.sum(1).clamp(min=1)).mean()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.rand(B, 3, R, R, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    views = torch.cat([augment(x), augment(x)])
    labels = torch.cat([y, y])
    with torch.autocast(device, dtype=torch.bfloat16):
        pooled = model.forward_head(model.forward_features(views), pre_logits=True)
        logits = model.head.fc(model.head.drop(pooled))
        loss = supcon(proj(pooled), labels) + F.cross_entropy(logits.float(), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    bank = F.normalize(pooled.detach().float(), dim=-1)
    bank_labels = labels
    del x, views, pooled, logits, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    xe = torch.rand(BE, 3, R, R, device=device)
    fe = F.normalize(model.forward_head(model.forward_features(xe), pre_logits=True).float(), dim=-1)
    top = (fe @ bank.T).topk(5, dim=-1).indices
    votes = bank_labels[top].mode(dim=-1).values
if device == "cuda":
    print(
        f"eval {tuple(votes.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
