"""Three reference-free / reference-light preference objectives on one hand-written Llama-style decoder,
as TRL's ORPOTrainer, CPOTrainer (SimPO loss) and KTOTrainer compute them.

Model: 16 pre-norm blocks of width 1,024 (RMSNorm, rotary position embeddings, 16 heads through
F.scaled_dot_product_attention(is_causal=True), SwiGLU 2,816), a 32,000-token embedding and an untied
lm_head; fp32 weights trained under bf16 autocast. Data: random token pairs (a shared prompt of 128 to 192
tokens, then a chosen and a rejected completion) right-padded to 512, the loss mask covering completion
tokens only (lengths drawn on the host).

Phases: (0) building and the first ORPO step: chosen and rejected concatenated into one forward of 16
sequences, per-token log-probs by log_softmax + gather (labels shifted, -100 masked to 0), the NLL of the
chosen completions plus lambda 0.1 times -logsigmoid of the log odds ratio (average log-probs,
log1p(-exp(.))), fused AdamW (lr 8e-6) with clip_grad_norm_ 1.0; (1) three more ORPO steps; (2) SimPO on
the same model with a fresh foreach AdamW: length-normalised log-probs from TRL's memory-lean
`selective_log_softmax` (gather of the logits minus a per-row logsumexp loop), -logsigmoid(beta (avg_c -
avg_r) - gamma) with beta 2.0, gamma 1.0, two steps; (3) KTO: a deepcopy of the policy cast to bfloat16 as
the frozen reference, 16 unpaired completions (8 desirable, 8 undesirable) plus the KL batch (the same
prompts with the completions rolled by one), the policy's KL log-probs and all reference log-probs under
no_grad, the KL estimate clamped at 0 and detached, desirable 1 - sigmoid(beta (logratio - KL)) and
undesirable 1 - sigmoid(beta (KL - logratio)), beta 0.1, weights 1.0, two steps; (4) evaluation under
torch.inference_mode: rewards beta (logp - ref_logp) of 64 pairs in chunks of 16 pairs. 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19404)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    V, D, LAYERS, HEADS, FF, L, PAIRS, EVAL_PAIRS, CHUNK = 1000, 64, 2, 4, 128, 64, 2, 4, 2
else:
    V, D, LAYERS, HEADS, FF, L, PAIRS, EVAL_PAIRS, CHUNK = 32000, 1024, 16, 16, 2816, 512, 8, 64, 16


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_cache(length, dim, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, dim, 2, device=device).float() / dim)
    freqs = torch.outer(torch.arange(length, device=device).float(), inv)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(D)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.ffn_norm = RMSNorm(D)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, HEADS, D // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        for blk in self.blocks:
            nn.init.normal_(blk.wo.weight, std=0.02 / math.sqrt(2 * LAYERS))

    def forward(self, ids):
        cos, sin = rope_cache(ids.shape[1], D // HEADS)
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, cos.to(x.dtype), sin.to(x.dtype))
        return self.lm_head(self.norm(x))


def make_batch(n, roll=False):
    ids = torch.randint(0, V, (2 * n, L))
    labels = ids.clone()
    for i in range(n):
        p = int(torch.randint(L // 4, 3 * L // 8, ()))
        ids[n + i, :p] = ids[i, :p]
        labels[i, :p] = -100
        labels[n + i, :p] = -100
        for r in (i, n + i):
            end = p + int(torch.randint(L // 8, L - p, ()))
            labels[r, end:] = -100
            ids[r, end:] = 0
    return ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def logps_gather(logits, labels):
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1]
    mask = labels != -100
    labels[~mask] = 0
    per_token = torch.gather(logits.log_softmax(-1), 2, labels.unsqueeze(2)).squeeze(2)
    return (per_token * mask).sum(-1), mask.sum(-1)


def selective_log_softmax(logits, index):
    selected = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    lse = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
    return selected - lse


def logps_selective(logits, labels):
    labels = labels[:, 1:].clone()
    mask = labels != -100
    labels[~mask] = 0
    per_token = selective_log_softmax(logits[:, :-1].float(), labels)
    return (per_token * mask).sum(-1), mask.sum(-1)


policy = Decoder().to(device)
print(f"policy params {sum(p.numel() for p in policy.parameters())}")
opt = torch.optim.AdamW(policy.parameters(), lr=8e-6, fused=amp)


def orpo_step():
    ids, labels = make_batch(PAIRS)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = policy(ids)
    logps, counts = logps_gather(logits.float(), labels)
    avg = logps / counts
    c, r = avg[:PAIRS], avg[PAIRS:]
    nll = -logps[:PAIRS].sum() / counts[:PAIRS].sum()
    log_odds = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
    loss = nll - 0.1 * F.logsigmoid(log_odds).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return loss.item()


policy.train()
print(f"orpo step 0 loss {orpo_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(3):
    loss = orpo_step()
print(f"orpo step 3 loss {loss:.4f}")
if device == "cuda":
    print(f"orpo peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt
opt = torch.optim.AdamW(policy.parameters(), lr=5e-7, foreach=True)
for step in range(2):
    ids, labels = make_batch(PAIRS)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = policy(ids)
    logps, counts = logps_selective(logits, labels)
    avg = logps / counts
    loss = -F.logsigmoid(2.0 * (avg[:PAIRS] - avg[PAIRS:]) - 1.0).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    print(f"simpo step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"simpo peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ref = copy.deepcopy(policy).to(torch.bfloat16).eval().requires_grad_(False)
BETA = 0.1
for step in range(2):
    ids, labels = make_batch(PAIRS)
    desirable = torch.tensor([True] * PAIRS + [False] * PAIRS, device=device)
    kl_ids = torch.cat([ids[:, : L // 4], ids[:, L // 4 :].roll(1, 0)], 1)
    kl_labels = torch.cat([labels[:, : L // 4], labels[:, L // 4 :].roll(1, 0)], 1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            kl_logps, _ = logps_selective(policy(kl_ids), kl_labels)
            ref_logps, _ = logps_selective(ref(ids), labels)
            ref_kl_logps, _ = logps_selective(ref(kl_ids), kl_labels)
        logps, _ = logps_selective(policy(ids), labels)
    kl = (kl_logps - ref_kl_logps).mean().clamp(min=0).detach()
    logratio = logps - ref_logps
    losses = torch.where(
        desirable, 1 - torch.sigmoid(BETA * (logratio - kl)), 1 - torch.sigmoid(BETA * (kl - logratio))
    )
    loss = losses.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    print(f"kto step {step} loss {loss.item():.4f} kl {kl.item():.4f}")
if device == "cuda":
    print(f"kto peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

policy.eval()
margins = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(0, EVAL_PAIRS, CHUNK):
        ids, labels = make_batch(CHUNK)
        lp, _ = logps_gather(policy(ids).float(), labels)
        rp, _ = logps_gather(ref(ids).float(), labels)
        rew = BETA * (lp - rp)
        margins.append((rew[:CHUNK] - rew[CHUNK:]).cpu())
margins = torch.cat(margins)
print(f"eval reward margin {margins.mean().item():.4f} accuracy {(margins > 0).float().mean().item():.3f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
