"""A Switch Transformer LM written by hand (Fedus et al. 2021): top-1 routing with a capacity factor.

Model: 8 pre-LN decoder blocks of width 768 (12 heads, causal SDPA), vocabulary 32,000, context 512; every
other block's MLP is a Switch layer of 8 GELU experts of 768 -> 3,072 -> 768 (the others dense MLPs of the
same shape). The router (fp32, as the paper keeps it) takes a softmax over the 8 experts; each token goes to
its argmax expert, scaled by that gate. Capacity = ceil(capacity_factor * tokens / experts): tokens are
sorted by expert with a stable argsort, their position inside their expert's queue is the sorted rank minus
the expert's start offset (bincount + cumsum), tokens over capacity are dropped (they ride the residual).
Each expert runs on its torch.split chunk of the kept tokens (index_select), and the outputs are combined
back with index_add_. Auxiliary losses: the load-balancing loss (E * sum_i f_i * P_i, coefficient 0.01) and
the router z-loss (mean logsumexp^2, coefficient 0.001).

Training: fp32 weights under bf16 autocast, AdamW(fused=True, lr 3e-4, weight decay 0.1), batch 16 x 512,
capacity factor 1.25, clip_grad_norm_ at 1.0. Phases: the first step; 3 more steps; evaluation under no_grad
at capacity factor 2.0 and batch 32 (the loss and the fraction of tokens dropped). 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2021)
if SMALL:
    D, N_HEAD, N_LAYER, VOCAB, T, B, N_EXPERT = 64, 4, 2, 500, 32, 2, 4
else:
    D, N_HEAD, N_LAYER, VOCAB, T, B, N_EXPERT = 768, 12, 8, 32000, 512, 16, 8
D_FF = 4 * D
device = "cuda" if torch.cuda.is_available() else "cpu"


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, N_HEAD, D // N_HEAD).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, D))


class DenseMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D, D_FF)
        self.fc2 = nn.Linear(D_FF, D)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))), None


class SwitchMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, N_EXPERT, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(D, D_FF), nn.GELU(), nn.Linear(D_FF, D)) for _ in range(N_EXPERT)
        )
        self.capacity_factor = 1.25

    def forward(self, x):
        b, t, d = x.shape
        tokens = x.reshape(-1, d)
        n = tokens.shape[0]
        with torch.autocast(device_type="cuda", enabled=False):
            logits = self.router(tokens.float())
            probs = logits.softmax(dim=-1)
        gate, expert = probs.max(dim=-1)
        capacity = math.ceil(self.capacity_factor * n / N_EXPERT)

        order = torch.argsort(expert, stable=True)
        counts = torch.bincount(expert, minlength=N_EXPERT)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(n, device=x.device) - starts[expert[order]]
        keep = rank < capacity
        kept = order[keep]
        kept_counts = counts.clamp(max=capacity).tolist()

        out = torch.zeros_like(tokens)
        chunks = torch.split(kept, kept_counts)
        for e, idx in enumerate(chunks):
            if idx.numel() == 0:
                continue
            h = self.experts[e](tokens.index_select(0, idx))
            h = h * gate.index_select(0, idx).unsqueeze(-1).to(h.dtype)
            out.index_add_(0, idx, h.to(out.dtype))

        frac_tokens = counts.float() / n
        frac_probs = probs.mean(dim=0)
        balance = N_EXPERT * (frac_tokens * frac_probs).sum()
        z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
        dropped = 1.0 - kept.numel() / n
        return out.view(b, t, d), (balance, z_loss, dropped)


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(D)
        self.mlp = SwitchMLP() if moe else DenseMLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h, aux = self.mlp(self.ln2(x))
        return x + h, aux


class SwitchLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(moe=i % 2 == 1) for i in range(N_LAYER))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        balance = z_loss = 0.0
        dropped = []
        for block in self.blocks:
            x, aux = block(x)
            if aux is not None:
                balance = balance + aux[0]
                z_loss = z_loss + aux[1]
                dropped.append(aux[2])
        logits = self.head(self.ln_f(x))
        ce = F.cross_entropy(logits.view(-1, VOCAB).float(), targets.reshape(-1))
        return ce, 0.01 * balance + 0.001 * z_loss, sum(dropped) / len(dropped)


def set_capacity(model, cf):
    for m in model.modules():
        if isinstance(m, SwitchMLP):
            m.capacity_factor = cf


model = SwitchLM().to(device)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")


def batch(bs):
    x = torch.randint(0, VOCAB, (bs, T + 1), device=device)
    return x[:, :-1], x[:, 1:]


def train_step():
    idx, tgt = batch(B)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        ce, aux, dropped = model(idx, tgt)
        loss = ce + aux
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return ce.item(), aux.item(), dropped


ce, aux, dropped = train_step()
print(f"step 0: ce {ce:.4f} aux {aux:.4f} dropped {dropped:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 4):
    ce, aux, dropped = train_step()
    print(f"step {step}: ce {ce:.4f} aux {aux:.4f} dropped {dropped:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

model.eval()
set_capacity(model, 2.0)
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    idx, tgt = batch(2 * B)
    ce, aux, dropped = model(idx, tgt)
print(f"eval: ce {ce.item():.4f} dropped {dropped:.3f}")
if device == "cuda":
    peak = torch.cuda.max_memory_allocated()
    print(f"eval peak {peak / 2**30:.2f} GiB, allocated {torch.cuda.memory_allocated()}")
