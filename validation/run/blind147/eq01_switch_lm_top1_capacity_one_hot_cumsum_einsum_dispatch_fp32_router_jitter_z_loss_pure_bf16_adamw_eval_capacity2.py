"""A Switch Transformer decoder LM written by hand (Fedus, Zoph and Shazeer 2021): 8 pre-norm blocks
1,024 wide with causal SDPA, every other block's MLP replaced by a Switch layer of 16 experts of
width 4,096, top-1 routing with a capacity factor of 1.25 in training and 2.0 in evaluation, the
dispatch and combine tensors built from one_hot and cumsum positions and applied by einsum, the
experts batched by einsum over stacked weights; the paper's selective precision: pure bf16 weights
with the router kept in fp32 and its input cast to fp32, multiplicative jitter noise on the router's
input while training, the load-balancing loss (0.01) and the router z-loss (0.001); AdamW (foreach),
batch 8 x 1,024, 3 steps; then a no_grad evaluation at capacity 2.0 on batch 16; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14701)
VOCAB, D, FF, E, LAYERS, HEADS, B, T, EB = (
    (300, 32, 64, 4, 2, 2, 2, 16, 4) if SMALL else (32000, 1024, 4096, 16, 8, 16, 8, 1024, 16)
)
TRAIN_CF, EVAL_CF, JITTER, LB_COEF, Z_COEF = 1.25, 2.0, 1e-2, 1e-2, 1e-3
device = "cuda" if torch.cuda.is_available() else "cpu"


class SwitchFFN(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.wi = nn.Parameter(torch.randn(E, D, FF) * D**-0.5)
        self.wo = nn.Parameter(torch.randn(E, FF, D) * FF**-0.5)
        self.capacity_factor = TRAIN_CF

    def forward(self, x):
        b, t, d = x.shape
        tokens = x.reshape(b * t, d)
        n = tokens.shape[0]
        cap = int(self.capacity_factor * n / E)
        r_in = tokens.float()
        if self.training:
            r_in = r_in * torch.empty_like(r_in).uniform_(1.0 - JITTER, 1.0 + JITTER)
        logits = self.router(r_in)  # fp32 router
        probs = logits.softmax(-1)
        gate, expert = probs.max(-1)
        mask = F.one_hot(expert, E).float()  # n, E
        position = torch.cumsum(mask, dim=0) * mask - mask  # position within the expert's buffer
        mask = mask * (position < cap).float()
        slot = F.one_hot(position.sum(-1).long().clamp(max=cap - 1), cap).float()  # n, C
        combine = gate[:, None, None] * mask[:, :, None] * slot[:, None, :]  # n, E, C
        dispatch = combine.bool().to(x.dtype)
        expert_in = torch.einsum("nec,nd->ecd", dispatch, tokens)
        h = F.relu(torch.einsum("ecd,edf->ecf", expert_in, self.wi))
        expert_out = torch.einsum("ecf,efd->ecd", h, self.wo)
        y = torch.einsum("nec,ecd->nd", combine.to(x.dtype), expert_out)
        density = mask.mean(0)
        density_proxy = probs.mean(0)
        lb = (density * density_proxy).sum() * E
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return y.reshape(b, t, d), LB_COEF * lb + Z_COEF * z


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.moe = moe
        self.mlp = SwitchFFN() if moe else nn.Sequential(nn.Linear(D, FF), nn.ReLU(), nn.Linear(FF, D))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        if self.moe:
            y, aux = self.mlp(self.ln2(x))
        else:
            y, aux = self.mlp(self.ln2(x)), 0.0
        return x + y, aux


class SwitchLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block(moe=i % 2 == 1) for i in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x, aux = self.emb(ids), 0.0
        for blk in self.blocks:
            x, a = blk(x)
            aux = aux + a
        return self.head(self.ln_f(x)), aux


model = SwitchLM().to(device=device, dtype=torch.bfloat16)
for blk in model.blocks:
    if blk.moe:
        blk.mlp.router.float()  # selective precision: the router stays fp32
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    ids = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits, aux = model(ids[:, :-1])
    ce = F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss = ce + aux
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} ce {ce.item():.3f} aux {float(aux):.4f} peak {torch.cuda.max_memory_allocated()}"
            f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, aux, ce, loss

model.eval()
for blk in model.blocks:
    if blk.moe:
        blk.mlp.capacity_factor = EVAL_CF
with torch.no_grad():
    ids = torch.randint(0, VOCAB, (EB, T + 1), device=device)
    logits, _ = model(ids[:, :-1])
    nll = F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval nll {nll.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
