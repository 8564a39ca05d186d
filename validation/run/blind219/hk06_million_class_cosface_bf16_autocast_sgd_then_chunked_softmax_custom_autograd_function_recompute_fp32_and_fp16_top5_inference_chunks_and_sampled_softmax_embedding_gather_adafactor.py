"""Large-class recognition with 1,000,000 classes (e.g. product or landmark ids): a small MLP embedder
(768 -> 1024 -> 256 with LayerNorm and GELU on random precomputed backbone features) and a 1M x 256
class-centre matrix, the whole softmax over all classes.

Phases: 3 steps of CosFace (Wang et al. 2018: s = 30, m = 0.35, the margin subtracted in place from the
target logits by advanced indexing) over the full 1M-way softmax at batch 1,024 under bf16 autocast with
SGD momentum; 3 steps in fp32 with the loss in a custom torch.autograd.Function that never materialises
the 1,024 x 1M logits (forward: logsumexp over class chunks of 131,072 with a running torch.logaddexp and
the target logit gathered per chunk, saving only the inputs and the log-normaliser; backward: the chunk's
softmax recomputed, the one-hot subtracted by scatter_add_, the embedding gradient accumulated by addmm_
and the weight gradient written chunk by chunk); top-5 classification of 8,192 queries under
inference_mode against an fp16 copy of the normalised centres in query chunks of 2,048 (2,048 x 1M fp16
logits per chunk); then sampled softmax: the batch's own classes plus 65,536 uniformly drawn negatives
gathered by F.embedding from the full matrix (a dense embedding backward into the 1M-row gradient) under
bf16 autocast with torch.optim.Adafactor, 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2196)
device = "cuda" if torch.cuda.is_available() else "cpu"
CLASSES = 20_000 if SMALL else 1_000_000
CHUNK = 4096 if SMALL else 131_072
BATCH, QUERIES, Q_CHUNK, NEG = (64, 256, 128, 1024) if SMALL else (1024, 8192, 2048, 65_536)
IN, EMB, S, M = 768, 256, 30.0, 0.35


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


embedder = nn.Sequential(nn.Linear(IN, 1024), nn.LayerNorm(1024), nn.GELU(), nn.Linear(1024, EMB)).to(device)
centres = nn.Parameter(torch.randn(CLASSES, EMB, device=device) * 0.01)
params = list(embedder.parameters()) + [centres]


def data(n):
    return torch.randn(n, IN, device=device), torch.randint(0, CLASSES, (n,), device=device)


# 1. CosFace over the full softmax, bf16 autocast, SGD momentum
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
rows = torch.arange(BATCH, device=device)
for step in range(3):
    x, y = data(BATCH)
    with torch.autocast(**amp):
        logits = F.linear(F.normalize(embedder(x)), F.normalize(centres))
        logits[rows, y] -= M
        loss = F.cross_entropy(logits * S, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del logits
print(f"cosface loss {loss.item():.4f}")
report("full softmax cosface bf16 sgd")


# 2. chunked softmax cross-entropy with recomputation
class ChunkedSoftmaxCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, emb, weight, labels):
        n = emb.shape[0]
        lse = torch.full((n,), float("-inf"), device=emb.device)
        target = torch.zeros(n, device=emb.device)
        for start in range(0, weight.shape[0], CHUNK):
            w = weight[start : start + CHUNK]
            logits = (emb @ w.T) * S
            lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=1))
            local = labels - start
            valid = (local >= 0) & (local < w.shape[0])
            picked = logits.gather(1, local.clamp(0, w.shape[0] - 1)[:, None]).squeeze(1)
            target = target + torch.where(valid, picked, torch.zeros_like(picked))
            del logits
        ctx.save_for_backward(emb, weight, labels, lse)
        return (lse - target).mean()

    @staticmethod
    def backward(ctx, grad_out):
        emb, weight, labels, lse = ctx.saved_tensors
        n = emb.shape[0]
        grad_emb = torch.zeros_like(emb)
        grad_w = torch.empty_like(weight)
        scale = grad_out * S / n
        for start in range(0, weight.shape[0], CHUNK):
            w = weight[start : start + CHUNK]
            p = torch.exp((emb @ w.T) * S - lse[:, None])
            local = labels - start
            valid = (local >= 0) & (local < w.shape[0])
            p.scatter_add_(1, local.clamp(0, w.shape[0] - 1)[:, None], -valid.to(p.dtype)[:, None])
            p.mul_(scale)
            grad_emb.addmm_(p, w)
            grad_w[start : start + CHUNK] = p.T @ emb
            del p
        return grad_emb, grad_w, None


for step in range(3):
    x, y = data(BATCH)
    loss = ChunkedSoftmaxCE.apply(F.normalize(embedder(x)), F.normalize(centres), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"chunked softmax loss {loss.item():.4f}")
report("chunked softmax custom function fp32")

# 3. top-5 inference over 1M classes, fp16 centres
del opt
with torch.inference_mode():
    w16 = F.normalize(centres).half()
    top5 = []
    for q in torch.randn(QUERIES, IN, device=device).split(Q_CHUNK):
        e = F.normalize(embedder(q)).half()
        top5.append((e @ w16.T).topk(5, dim=1).indices)
    top5 = torch.cat(top5)
    del w16
print(f"top5 {tuple(top5.shape)}")
report("top5 inference fp16")

# 4. sampled softmax with F.embedding, bf16 autocast, Adafactor
opt = torch.optim.Adafactor(params, lr=1e-2)
for step in range(3):
    x, y = data(BATCH)
    neg = torch.randint(0, CLASSES, (NEG,), device=device)
    cand = torch.cat([y, neg])
    with torch.autocast(**amp):
        w = F.normalize(F.embedding(cand, centres))
        logits = F.linear(F.normalize(embedder(x)), w) * S
        loss = F.cross_entropy(logits, torch.arange(BATCH, device=device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"sampled softmax loss {loss.item():.4f}")
report("sampled softmax embedding adafactor bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
