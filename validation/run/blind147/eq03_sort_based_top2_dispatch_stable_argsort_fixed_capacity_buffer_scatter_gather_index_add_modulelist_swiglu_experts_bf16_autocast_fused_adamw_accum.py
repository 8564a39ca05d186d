"""A decoder LM whose MoE layers dispatch by sorting, as Megablocks- and Tutel-style training code
does with a fixed capacity so that no shape depends on the routing: top-2 of 8 experts with the two
gates renormalised, the (token, choice) pairs ordered by a stable argsort of their expert ids, each
pair's rank within its expert from the experts' counts (scatter_add_ of ones) and their exclusive
cumsum, pairs past the capacity (1.5 x the even share) sent to one extra dump row, the tokens
scattered into an (E * C + 1, D) buffer, the experts an nn.ModuleList of SwiGLU MLPs looped over
their C-row slices, the outputs gathered back by slot and summed into the tokens with index_add_;
the Switch load-balancing loss; RMSNorm, rotary-free learned positions, causal SDPA; fp32 weights
under bf16 autocast, fused AdamW, 2 micro-batches of 4 x 1,024 accumulated per step, 2 steps; then
a no_grad scoring pass at batch 12; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14703)
VOCAB, D, FF, E, LAYERS, HEADS, B, T, EB = (
    (300, 32, 48, 4, 2, 2, 2, 16, 3) if SMALL else (50304, 768, 2048, 8, 10, 12, 4, 1024, 12)
)
TOPK, CF, ACCUM = 2, 1.5, 2
device = "cuda" if torch.cuda.is_available() else "cpu"


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SortedMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.experts = nn.ModuleList(SwiGLU() for _ in range(E))

    def forward(self, x):
        b, t, d = x.shape
        tokens = x.reshape(b * t, d)
        n = tokens.shape[0]
        cap = int(CF * n * TOPK / E)
        logits = self.router(tokens).float()
        probs = logits.softmax(-1)
        gates, experts = probs.topk(TOPK, dim=-1)
        gates = gates / gates.sum(-1, keepdim=True)
        flat_expert = experts.reshape(-1)  # n * k
        order = torch.argsort(flat_expert, stable=True)
        sorted_expert = flat_expert[order]
        counts = torch.zeros(E, device=x.device, dtype=torch.long).scatter_add_(
            0, flat_expert, torch.ones_like(flat_expert)
        )
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(n * TOPK, device=x.device) - starts[sorted_expert]
        slot = torch.where(rank < cap, sorted_expert * cap + rank, torch.full_like(rank, E * cap))
        token_of = order // TOPK
        buf = tokens.new_zeros(E * cap + 1, d)
        buf = buf.scatter(0, slot.unsqueeze(-1).expand(-1, d), tokens[token_of])
        outs = [expert(buf[e * cap : (e + 1) * cap]) for e, expert in enumerate(self.experts)]
        out_buf = torch.cat([*outs, outs[0].new_zeros(1, d)], dim=0)
        y = out_buf[slot] * gates.reshape(-1)[order].unsqueeze(-1).to(out_buf.dtype)
        combined = torch.zeros(n, d, device=x.device, dtype=y.dtype).index_add_(0, token_of, y)
        frac = counts.float() / (n * TOPK)
        aux = E * (frac * probs.mean(0)).sum()
        return combined.view(b, t, d), aux


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.moe = SortedMoE()

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        )
        y, aux = self.moe(self.n2(x))
        return x + y, aux


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        aux = 0.0
        for blk in self.blocks:
            x, a = blk(x)
            aux = aux + a
        return self.head(self.norm(x)), aux / LAYERS


model = LM().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
opt = torch.optim.AdamW(
    model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    for _micro in range(ACCUM):
        ids = torch.randint(0, VOCAB, (B, T + 1), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits, aux = model(ids[:, :-1])
            loss = F.cross_entropy(logits.view(-1, VOCAB), ids[:, 1:].reshape(-1)) + 0.01 * aux
        (loss / ACCUM).backward()
        del logits
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss, aux

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    ids = torch.randint(0, VOCAB, (EB, T + 1), device=device)
    logits, _ = model(ids[:, :-1])
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    score = logp.sum(-1)
if device == "cuda":
    print(
        f"score mean {score.mean().item():.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
