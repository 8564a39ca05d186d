"""Dynamic-depth transformers: Mixture-of-Depths (Raposo et al. 2024) and early-exit heads.

A decoder-only transformer by hand (embedding 32,000 x 1024, 12 pre-LN blocks of 16 heads with SDPA and a
SwiGLU MLP of 2816, tied output head). In the Mixture-of-Depths model every other block routes: a linear
router scores each token, torch.topk keeps a fixed capacity of 12.5% of the sequence per sample, the kept
indices are sorted so the causal order survives, the tokens are gathered, run through the block (causal
SDPA among themselves), scaled by the router's sigmoid weight and scatter-added back into the residual
stream; an auxiliary BCE loss teaches a small MLP predictor to guess the top-k membership causally.

Phases: 3 steps of MoD at batch 8 x 1024 under bf16 autocast with fused AdamW; evaluation under no_grad at
batch 16 x 1024; then the early-exit variant (the same body without routing, exit heads after blocks 4, 8
and 12 sharing the tied embedding, losses weighted 0.25 / 0.5 / 1.0, right-padded sequences whose
attention uses an explicit boolean mask of causal and key padding, ignore_index on padded targets),
non-reentrant checkpointing per block and foreach AdamW under bf16 autocast at batch 8 x 1024; then an
inference_mode evaluation through each exit depth at batch 32 x 512. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2214)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, D, HEADS, FF, LAYERS = (1000, 128, 4, 352, 4) if SMALL else (32000, 1024, 16, 2816, 12)
BATCH, SEQ, EVAL_BATCH = (2, 64, 4) if SMALL else (8, 1024, 16)
CAPACITY = 0.125
EXITS = (1, 2, 4) if SMALL else (4, 8, 12)
autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def delta(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        gate, up = self.gate_up(self.ln2(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up) - x

    def forward(self, x, mask=None):
        return x + self.delta(x, mask)


class MoDBlock(Block):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, 1, bias=False)
        self.predictor = nn.Sequential(nn.Linear(D, D // 8), nn.SiLU(), nn.Linear(D // 8, 1))

    def forward(self, x, aux):
        b, t, _ = x.shape
        k = int(CAPACITY * t)
        logits = self.router(x).squeeze(-1)  # [b, t]
        top = torch.topk(logits, k, dim=1, sorted=False).indices
        idx = torch.sort(top, dim=1).values
        gather_idx = idx.unsqueeze(-1).expand(-1, -1, D)
        selected = torch.gather(x, 1, gather_idx)
        w = torch.sigmoid(torch.gather(logits, 1, idx)).unsqueeze(-1)
        out = x.scatter_add(1, gather_idx, self.delta(selected) * w.to(x.dtype))
        targets = torch.zeros_like(logits).scatter_(1, idx, 1.0)
        aux.append(
            F.binary_cross_entropy_with_logits(
                self.predictor(x.detach()).squeeze(-1).float(), targets.float()
            )
        )
        return out


class MoDLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(MoDBlock() if i % 2 == 1 else Block() for i in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx):
        x, aux = self.emb(idx), []
        for blk in self.blocks:
            x = blk(x, aux) if isinstance(blk, MoDBlock) else blk(x)
        return F.linear(self.ln_f(x), self.emb.weight), sum(aux)


model = MoDLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
for step in range(3):
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    with autocast:
        logits, aux = model(idx[:, :-1])
        loss = F.cross_entropy(logits.view(-1, VOCAB).float(), idx[:, 1:].reshape(-1)) + 0.01 * aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    del logits, aux
print(f"mod loss {loss.item():.4f}")
report("mixture of depths bf16 fused adamw")

model.eval()
with torch.no_grad(), autocast:
    idx = torch.randint(0, VOCAB, (EVAL_BATCH, SEQ + 1), device=device)
    logits, _ = model(idx[:, :-1])
    nll = F.cross_entropy(logits.view(-1, VOCAB).float(), idx[:, 1:].reshape(-1)).item()
    del logits
print(f"mod eval nll {nll:.4f}")
report("mixture of depths no_grad eval")

del model, opt, loss
if device == "cuda":
    torch.cuda.empty_cache()


class EarlyExitLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.exit_norms = nn.ModuleList(nn.LayerNorm(D) for _ in EXITS)

    def forward(self, idx, mask, depth=LAYERS, ckpt=False):
        x, outs = self.emb(idx), []
        for i, blk in enumerate(self.blocks[:depth]):
            x = checkpoint(blk, x, mask, use_reentrant=False) if ckpt else blk(x, mask)
            if i + 1 in EXITS:
                outs.append(F.linear(self.exit_norms[EXITS.index(i + 1)](x), self.emb.weight))
        return outs


def padded_batch(b, t):
    idx = torch.randint(0, VOCAB, (b, t + 1), device=device)
    lengths = torch.linspace(t // 2, t, b, device=device).long()
    pos = torch.arange(t + 1, device=device)
    pad = pos[None, :] >= lengths[:, None]
    targets = idx[:, 1:].masked_fill(pad[:, 1:], -100)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    mask = causal[None, None] & ~pad[:, None, None, :-1]
    mask = (
        mask | torch.eye(t, dtype=torch.bool, device=device)[None, None]
    )  # padded rows attend to themselves
    return idx[:, :-1], targets, mask


model = EarlyExitLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
weights = (0.25, 0.5, 1.0)
for step in range(3):
    idx, targets, mask = padded_batch(BATCH, SEQ)
    with autocast:
        outs = model(idx, mask, ckpt=True)
        loss = sum(
            w * F.cross_entropy(o.view(-1, VOCAB).float(), targets.reshape(-1)) for w, o in zip(weights, outs)
        )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del outs
print(f"early-exit loss {loss.item():.4f}")
report("early exit checkpointed foreach adamw")

model.eval()
with torch.inference_mode(), autocast:
    idx, targets, mask = padded_batch(4 * BATCH, SEQ // 2)
    nlls = []
    for depth in EXITS:
        logits = model(idx, mask, depth=depth)[-1]
        nlls.append(F.cross_entropy(logits.view(-1, VOCAB).float(), targets.reshape(-1)).item())
        del logits
print(f"per-exit nll {[round(v, 3) for v in nlls]}")
report("early exit inference_mode per depth")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
