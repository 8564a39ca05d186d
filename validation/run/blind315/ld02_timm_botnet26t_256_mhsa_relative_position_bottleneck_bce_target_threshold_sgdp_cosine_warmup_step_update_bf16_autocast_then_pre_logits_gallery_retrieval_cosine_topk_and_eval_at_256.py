"""timm's BoTNet-26t (ResNet-26t whose last stage's 3x3 convolutions are replaced by multi-head
self-attention with 2D relative-position logits, fixed to a 256 x 256 input) trained for multi-label
style binary cross-entropy as in the "ResNet strikes back" recipes: ``timm.loss.BinaryCrossEntropy``
with label smoothing 0.1 and ``target_threshold=0.2`` on one-hot targets softened by a by-hand
two-image cutmix box; the optimizer is ``timm.optim.create_optimizer_v2(..., 'sgdp')`` (SGD with
projection, weight decay off for biases and norms) under timm's CosineLRScheduler with warmup,
stepped per update. bf16 autocast.

Phases: 0 model and optimizer; 1 four training steps of batch 48 at 256; 2 gallery embedding:
``forward_features`` then ``forward_head(pre_logits=True)`` over 4 batches of 64 under no_grad,
L2-normalised and kept; 3 queries: 64 query embeddings against the gallery by cosine similarity and
top-10; 4 eval-mode classification of batch 128 with per-class sigmoid scores."""

import timm
import torch
import torch.nn.functional as F
from timm.loss import BinaryCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler

torch.manual_seed(3152)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 500
B, R = 48, 256


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def cutmix_pair(x, y_onehot, lam):
    h, w = x.shape[-2:]
    cut = (1 - lam) ** 0.5
    ch, cw = int(h * cut), int(w * cut)
    cy, cx = int(torch.randint(h, (1,))), int(torch.randint(w, (1,)))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
    x = x.clone()
    x[..., y0:y1, x0:x1] = x.flip(0)[..., y0:y1, x0:x1]
    lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
    return x, lam * y_onehot + (1 - lam) * y_onehot.flip(0)


model = timm.create_model("botnet26t_256", pretrained=False, num_classes=NUM_CLASSES).to(device)
opt = create_optimizer_v2(model, "sgdp", lr=0.4, weight_decay=5e-5, momentum=0.9, nesterov=True)
sched = CosineLRScheduler(opt, t_initial=100, warmup_t=3, warmup_lr_init=1e-4, t_in_epochs=False)
criterion = BinaryCrossEntropy(smoothing=0.1, target_threshold=0.2)
report("model")

model.train()
num_updates = 0
for step in range(4):
    x = torch.randn(B, 3, R, R, device=device)
    y = F.one_hot(torch.randint(0, NUM_CLASSES, (B,), device=device), NUM_CLASSES).float()
    x, y = cutmix_pair(x, y, lam=0.7)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = criterion(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    num_updates += 1
    sched.step_update(num_updates=num_updates)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.5f}")
    del x, y, logits, loss
report("train")

model.eval()
gallery = []
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for _ in range(4):
        x = torch.randn(64, 3, R, R, device=device)
        feats = model.forward_features(x)
        emb = model.forward_head(feats, pre_logits=True)
        gallery.append(F.normalize(emb.float(), dim=-1))
gallery = torch.cat(gallery)
del x, feats, emb
report("gallery")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    q = F.normalize(
        model.forward_head(
            model.forward_features(torch.randn(64, 3, R, R, device=device)), pre_logits=True
        ).float(),
        dim=-1,
    )
    sims = q @ gallery.T
    top = sims.topk(10, dim=-1)
if device == "cuda":
    print(f"retrieval {tuple(top.indices.shape)} best {top.values[:, 0].mean().item():.4f}")
del q, sims, top
report("query")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    scores = torch.sigmoid(model(torch.randn(128, 3, R, R, device=device)).float())
    positives = (scores > 0.5).sum(-1)
if device == "cuda":
    print(f"eval positives {positives.float().mean().item():.2f}")
report("eval")
