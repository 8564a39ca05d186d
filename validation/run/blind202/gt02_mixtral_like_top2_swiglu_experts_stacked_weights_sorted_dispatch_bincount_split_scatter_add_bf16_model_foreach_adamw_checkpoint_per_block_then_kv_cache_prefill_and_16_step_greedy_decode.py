"""A Mixtral-like sparse decoder by hand, trained in bf16 with per-block checkpointing, then KV-cache decoded.

Model: 6 decoder blocks of width 1,024 (RMSNorm, rotary embeddings, grouped-query attention with 16 query
and 4 key/value heads through SDPA), vocabulary 32,000, untied head. Each block's MLP is a sparse MoE layer
of 8 SwiGLU experts (1,024 -> 2,816 -> 1,024) whose weights are stacked parameters w1, w3 of (8, 1,024,
2,816) and w2 of (8, 2,816, 1,024); the router takes the top 2 of the softmax over 8 experts and
renormalises the two weights (Mixtral). Dispatch: the (token, slot) pairs are flattened, argsorted by
expert, counted with bincount and moved to the host (.tolist()) to torch.split the permuted tokens per
expert; each expert's chunk runs x @ w1[e], x @ w3[e], silu * and @ w2[e]; the weighted outputs are put back
with scatter_add_. The load-balancing loss of Switch (coefficient 0.02) is added.

Training: the model cast with .to(torch.bfloat16), AdamW (foreach default, lr 2e-4, betas 0.9/0.95), batch 8
x 1,024, every block under torch.utils.checkpoint (use_reentrant=False). Inference: torch.inference_mode, a
prompt of 8 x 256 tokens prefilled into a preallocated KV cache of 8 x 4 heads x 272 positions per layer,
then 16 greedy steps of one token. Phases: the first training step; 2 more steps; the prefill; the 16
decoding steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8_7)
if SMALL:
    D, N_HEAD, N_KV, N_LAYER, VOCAB, T, B, D_FF, N_EXPERT = 64, 4, 2, 2, 300, 32, 2, 96, 4
    PROMPT, NEW = 16, 4
else:
    D, N_HEAD, N_KV, N_LAYER, VOCAB, T, B, D_FF, N_EXPERT = 1024, 16, 4, 6, 32000, 1024, 8, 2816, 8
    PROMPT, NEW = 256, 16
TOP_K = 2
HD = D // N_HEAD
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"{tag}: peak {peak / 2**20:.0f} MiB, reserved {reserved / 2**20:.0f} MiB")
        torch.cuda.reset_peak_memory_stats()


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_cache(t, device):
    inv = 1.0 / (1e6 ** (torch.arange(0, HD, 2, device=device).float() / HD))
    f = torch.outer(torch.arange(t, device=device).float(), inv)
    return torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(D, N_HEAD * HD, bias=False)
        self.wk = nn.Linear(D, N_KV * HD, bias=False)
        self.wv = nn.Linear(D, N_KV * HD, bias=False)
        self.wo = nn.Linear(N_HEAD * HD, D, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=0):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, N_HEAD, HD).transpose(1, 2)
        k = self.wk(x).view(b, t, N_KV, HD).transpose(1, 2)
        v = self.wv(x).view(b, t, N_KV, HD).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            ck, cv = cache
            ck[:, :, pos : pos + t] = k
            cv[:, :, pos : pos + t] = v
            k, v = ck[:, :, : pos + t], cv[:, :, : pos + t]
        k = k.repeat_interleave(N_HEAD // N_KV, dim=1)
        v = v.repeat_interleave(N_HEAD // N_KV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None or t > 1)
        return self.wo(y.transpose(1, 2).reshape(b, t, D))


class SparseMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, N_EXPERT, bias=False)
        self.w1 = nn.Parameter(torch.randn(N_EXPERT, D, D_FF) * D**-0.5)
        self.w3 = nn.Parameter(torch.randn(N_EXPERT, D, D_FF) * D**-0.5)
        self.w2 = nn.Parameter(torch.randn(N_EXPERT, D_FF, D) * D_FF**-0.5)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, D)
        n = x.shape[0]
        router_logits = self.gate(x)
        probs = F.softmax(router_logits, dim=-1, dtype=torch.float)
        weights, experts = torch.topk(probs, TOP_K, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)

        flat_experts = experts.reshape(-1)
        order = torch.argsort(flat_experts)
        token_of = order // TOP_K
        counts = torch.bincount(flat_experts, minlength=N_EXPERT)
        permuted = x.index_select(0, token_of)
        outs = []
        for e, chunk in enumerate(torch.split(permuted, counts.tolist())):
            h = F.silu(chunk @ self.w1[e]) * (chunk @ self.w3[e])
            outs.append(h @ self.w2[e])
        y = torch.cat(outs) * weights.reshape(-1, 1).index_select(0, order)
        out = torch.zeros_like(x).scatter_add_(0, token_of.unsqueeze(-1).expand(-1, D), y)

        balance = N_EXPERT * (counts.float() / (n * TOP_K) * probs.mean(0)).sum()
        return out.view(shape), balance


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = RMSNorm(D)
        self.attn = Attention()
        self.n2 = RMSNorm(D)
        self.moe = SparseMoE()

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.attn(self.n1(x), cos, sin, cache, pos)
        h, balance = self.moe(self.n2(x))
        return x + h, balance


class MoELM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.checkpointing = True

    def forward(self, idx, caches=None, pos=0):
        t = idx.shape[1]
        cos, sin = rope_cache(pos + t, idx.device)
        cos, sin = cos[pos:].to(torch.bfloat16), sin[pos:].to(torch.bfloat16)
        x = self.embed(idx)
        balance = 0.0
        for i, block in enumerate(self.blocks):
            if self.training and self.checkpointing:
                x, bal = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x, bal = block(x, cos, sin, None if caches is None else caches[i], pos)
            balance = balance + bal
        return self.head(self.norm(x)), balance / N_LAYER


model = MoELM().to(device=device, dtype=torch.bfloat16)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.95), weight_decay=0.1)


def train_step():
    data = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits, balance = model(data[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), data[:, 1:].reshape(-1))
    (loss + 0.02 * balance).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for step in (1, 2):
    print(f"step {step} loss {train_step():.4f}")
report("train")

model.eval()
caches = [
    (
        torch.zeros(B, N_KV, PROMPT + NEW, HD, device=device, dtype=torch.bfloat16),
        torch.zeros(B, N_KV, PROMPT + NEW, HD, device=device, dtype=torch.bfloat16),
    )
    for _ in range(N_LAYER)
]
with torch.inference_mode():
    prompt = torch.randint(0, VOCAB, (B, PROMPT), device=device)
    logits, _ = model(prompt, caches, 0)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    report("prefill")
    out = [nxt]
    for i in range(NEW - 1):
        logits, _ = model(nxt, caches, PROMPT + i)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
    tokens = torch.cat(out, 1)
print(f"generated {tuple(tokens.shape)}, first row {tokens[0, :8].tolist()}")
report("decode")
