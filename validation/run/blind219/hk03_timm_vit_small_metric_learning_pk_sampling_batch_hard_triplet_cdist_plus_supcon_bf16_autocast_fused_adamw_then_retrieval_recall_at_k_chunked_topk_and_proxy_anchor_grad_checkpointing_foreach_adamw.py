"""Deep metric learning with a timm ViT-S/16 (random init, num_classes=0: the pooled 384-d token) and a
Linear 384 -> 256 embedding head, on random 224 x 224 images sampled P x K (32 classes x 4 images).

Phases: 3 steps at batch 128 of batch-hard triplet loss (Hermans et al. 2017: torch.cdist of the L2-normalised
embeddings, the hardest positive by a masked max and the hardest negative by a masked min, margin 0.2) plus a
supervised contrastive loss (Khosla et al. 2020: temperature 0.1, the self-similarity masked out, the mean
log-probability over each anchor's positives) under bf16 autocast with fused AdamW; retrieval evaluation
under inference_mode: a gallery of 8,192 and 2,048 queries embedded at batch 512, distances by torch.cdist
in query chunks of 512, torch.topk(10) and recall@1/5/10 from the gathered gallery labels; then
Proxy-Anchor loss (Kim et al. 2020: 1,000 learnable proxies, alpha 32, margin 0.1, positive and negative
terms over the proxies with and without positives in the batch) at batch 256 with the ViT's blocks under
timm's set_grad_checkpointing, fp32, foreach AdamW with a 100x learning rate for the proxies, 3 steps;
and an embedding pass at batch 1,024 under fp16 autocast with no_grad. 4 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2193)
device = "cuda" if torch.cuda.is_available() else "cpu"
P, K = (4, 2) if SMALL else (32, 4)
GALLERY, QUERIES, EVAL_BATCH, Q_CHUNK = (64, 32, 16, 8) if SMALL else (8192, 2048, 512, 512)
PA_BATCH, BIG_BATCH = (16, 32) if SMALL else (256, 1024)
N_CLASSES, EMB = 1000, 256
MODEL = "vit_tiny_patch16_224" if SMALL else "vit_small_patch16_224"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model(MODEL, pretrained=False, num_classes=0)
        self.head = nn.Linear(self.backbone.num_features, EMB)

    def forward(self, x):
        return F.normalize(self.head(self.backbone(x)), dim=-1)


def pk_batch(p, k):
    labels = torch.randint(0, N_CLASSES, (p,), device=device).repeat_interleave(k)
    return torch.randn(p * k, 3, 224, 224, device=device), labels


def batch_hard_triplet(emb, labels, margin=0.2):
    d = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    hardest_pos = (d * same).max(dim=1).values
    hardest_neg = (d + 1e5 * same).min(dim=1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean()


def supcon(emb, labels, tau=0.1):
    n = emb.shape[0]
    logits = emb @ emb.T / tau
    self_mask = torch.eye(n, dtype=torch.bool, device=emb.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    pos = (labels[:, None] == labels[None, :]) & ~self_mask
    mean_log_prob_pos = log_prob.masked_fill(~pos, 0).sum(1) / pos.sum(1).clamp(min=1)
    return -mean_log_prob_pos.mean()


model = Embedder().to(device)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=device == "cuda")

# 1. batch-hard triplet + SupCon, bf16 autocast, fused AdamW
model.train()
for step in range(3):
    x, y = pk_batch(P, K)
    with torch.autocast(**amp):
        emb = model(x)
    emb = emb.float()
    loss = batch_hard_triplet(emb, y) + supcon(emb, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"triplet+supcon loss {loss.item():.4f}")
report("triplet supcon bf16 fused adamw")

# 2. retrieval evaluation
model.eval()
with torch.inference_mode():

    def embed(n):
        out = []
        for i in range(n // EVAL_BATCH):
            with torch.autocast(**amp):
                out.append(model(torch.randn(EVAL_BATCH, 3, 224, 224, device=device)).float())
        return torch.cat(out)

    gallery, g_labels = embed(GALLERY), torch.randint(0, N_CLASSES, (GALLERY,), device=device)
    queries, q_labels = embed(QUERIES), torch.randint(0, N_CLASSES, (QUERIES,), device=device)
    hits = []
    for q, ql in zip(queries.split(Q_CHUNK), q_labels.split(Q_CHUNK)):
        d = torch.cdist(q, gallery)
        top = d.topk(10, dim=1, largest=False).indices
        hits.append(g_labels[top] == ql[:, None])
    hits = torch.cat(hits)
    recall = {k: hits[:, :k].any(dim=1).float().mean().item() for k in (1, 5, 10)}
print("recall@k " + " ".join(f"{k}:{v:.4f}" for k, v in recall.items()))
report("retrieval eval")

# 3. Proxy-Anchor, gradient checkpointing, fp32, foreach AdamW
del opt, gallery, queries, hits
proxies = nn.Parameter(torch.randn(N_CLASSES, EMB, device=device) * 0.01)
nn.init.kaiming_normal_(proxies, mode="fan_out")
opt = torch.optim.AdamW(
    [{"params": model.parameters()}, {"params": [proxies], "lr": 1e-2}],
    lr=1e-4,
    weight_decay=1e-4,
    foreach=True,
)
model.backbone.set_grad_checkpointing(True)
model.train()
alpha, mrg = 32.0, 0.1
for step in range(3):
    x, y = pk_batch(PA_BATCH // 4, 4)
    emb = model(x)
    cos = F.linear(emb, F.normalize(proxies))
    p_one_hot = F.one_hot(y, N_CLASSES).float()
    n_one_hot = 1 - p_one_hot
    pos_exp = torch.exp(-alpha * (cos - mrg))
    neg_exp = torch.exp(alpha * (cos + mrg))
    num_valid = (p_one_hot.sum(dim=0) != 0).sum()
    p_sim_sum = torch.where(p_one_hot == 1, pos_exp, torch.zeros_like(pos_exp)).sum(dim=0)
    n_sim_sum = torch.where(n_one_hot == 1, neg_exp, torch.zeros_like(neg_exp)).sum(dim=0)
    loss = torch.log1p(p_sim_sum).sum() / num_valid + torch.log1p(n_sim_sum).sum() / N_CLASSES
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"proxy anchor loss {loss.item():.4f}")
report("proxy anchor checkpointing fp32 foreach adamw")

# 4. large-batch embedding, fp16 autocast, no_grad
model.eval()
fp16 = dict(device_type="cuda", dtype=torch.float16, enabled=device == "cuda")
with torch.no_grad(), torch.autocast(**fp16):
    e = model(torch.randn(BIG_BATCH, 3, 224, 224, device=device))
print(f"embeddings {tuple(e.shape)} norm {e.float().norm(dim=1).mean().item():.4f}")
report("fp16 large batch embedding")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
