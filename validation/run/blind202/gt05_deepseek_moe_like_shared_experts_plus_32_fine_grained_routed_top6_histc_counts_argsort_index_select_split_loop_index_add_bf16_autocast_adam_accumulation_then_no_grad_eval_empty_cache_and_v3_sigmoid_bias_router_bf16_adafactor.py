"""A DeepSeekMoE-like language model written by hand: shared experts plus fine-grained routed experts.

Model: 4 pre-RMSNorm decoder blocks of width 1,024 (16 heads, causal SDPA, rotary-free learned positions),
vocabulary 32,000, context 1,024. The first block has a dense SwiGLU MLP (1,024 -> 2,816); the other three
are DeepSeekMoE layers: 2 shared SwiGLU experts (1,024 -> 704, always on, as one fused SwiGLU of 1,408) plus
32 fine-grained routed SwiGLU experts (1,024 -> 704) of which each token takes the top 6 by softmax score
(weights not renormalised, as DeepSeekMoE). Dispatch: the (token, slot) expert ids are flattened, counted
with torch.histc (float bins), argsorted; the token rows are gathered with index_select, torch.split per
expert with the counts moved to the host, run expert by expert, scaled by their gate and summed back with
index_add_. The expert-level balance loss (alpha 0.01: E/K * sum f_i P_i) is added to the loss.

Training: fp32 weights under bf16 autocast, Adam (foreach default, lr 4e-4), gradient accumulation over 2
micro-batches of 4 x 1,024. Then a no_grad evaluation loss at batch 8. Then, after del + empty_cache, a
DeepSeek-V3-style variant of the same shape: a sigmoid router with a per-expert bias (not a parameter) that
only affects the selection, top-6 weights renormalised, the bias nudged by +/-1e-3 from each step's expert
load (auxiliary-loss-free balancing); the model cast with .to(torch.bfloat16) and trained with
torch.optim.Adafactor (lr 1e-2) at batch 8 x 1,024. Phases: the first optimizer step (2 micro-batches); 2
more steps; the no_grad evaluation; the V3 variant's first step; its 2 more steps. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2024)
if SMALL:
    D, HEADS, LAYERS, VOCAB, T, MB, N_ROUTED, TOP_K, D_EXPERT, D_DENSE = 64, 4, 2, 300, 32, 2, 8, 2, 32, 128
else:
    D, HEADS, LAYERS, VOCAB, T, MB, N_ROUTED, TOP_K, D_EXPERT, D_DENSE = (
        1024,
        16,
        4,
        32000,
        1024,
        4,
        32,
        6,
        704,
        2816,
    )
N_SHARED, ACCUM = 2, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class DeepSeekMoE(nn.Module):
    def __init__(self, v3=False):
        super().__init__()
        self.v3 = v3
        self.shared = SwiGLU(D, N_SHARED * D_EXPERT)
        self.experts = nn.ModuleList(SwiGLU(D, D_EXPERT) for _ in range(N_ROUTED))
        self.router = nn.Linear(D, N_ROUTED, bias=False)
        self.register_buffer("bias", torch.zeros(N_ROUTED))
        self.last_load = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, D)
        n = x.shape[0]
        logits = self.router(x).float()
        if self.v3:
            affinity = logits.sigmoid()
            _, experts = torch.topk(affinity + self.bias, TOP_K, dim=-1)
            weights = affinity.gather(1, experts)
            weights = weights / weights.sum(-1, keepdim=True)
            probs = None
        else:
            probs = logits.softmax(-1)
            weights, experts = torch.topk(probs, TOP_K, dim=-1)

        flat = experts.reshape(-1)
        counts = torch.histc(flat.float(), bins=N_ROUTED, min=0, max=N_ROUTED - 1)
        order = flat.argsort()
        token_of = order // TOP_K
        gates = weights.reshape(-1).index_select(0, order)
        rows = x.index_select(0, token_of)
        out = self.shared(x)
        for e, (chunk, idx, g) in enumerate(
            zip(
                rows.split(counts.long().tolist()),
                token_of.split(counts.long().tolist()),
                gates.split(counts.long().tolist()),
                strict=True,
            )
        ):
            if chunk.shape[0] == 0:
                continue
            y = self.experts[e](chunk) * g.unsqueeze(-1).to(chunk.dtype)
            out = out.index_add(0, idx, y.to(out.dtype))
        self.last_load = counts.detach()
        aux = None
        if probs is not None:
            f = counts * N_ROUTED / (TOP_K * n)
            aux = (f * probs.mean(0)).sum()
        return out.view(shape), aux


class Block(nn.Module):
    def __init__(self, moe, v3=False):
        super().__init__()
        self.n1 = RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = RMSNorm(D)
        self.mlp = DeepSeekMoE(v3) if moe else SwiGLU(D, D_DENSE)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )
        h = self.mlp(self.n2(x))
        if isinstance(h, tuple):
            h, aux = h
        else:
            aux = None
        return x + h, aux


class LM(nn.Module):
    def __init__(self, v3=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        self.blocks = nn.ModuleList(Block(moe=i > 0, v3=v3) for i in range(LAYERS))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        aux_total = 0.0
        for blk in self.blocks:
            x, aux = blk(x)
            if aux is not None:
                aux_total = aux_total + aux
        return self.head(self.norm(x)), aux_total


def lm_loss(model, bs):
    data = torch.randint(0, VOCAB, (bs, T + 1), device=device)
    logits, aux = model(data[:, :-1])
    ce = F.cross_entropy(logits.float().reshape(-1, VOCAB), data[:, 1:].reshape(-1))
    return ce, aux


model = LM().to(device)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=4e-4)


def train_step():
    total = 0.0
    for _ in range(ACCUM):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
            ce, aux = lm_loss(model, MB)  # noqa: F821 (deleted before the V3 variant)
            loss = (ce + 0.01 * aux) / ACCUM
        loss.backward()
        total += ce.item() / ACCUM
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


model.train()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for step in (1, 2):
    print(f"step {step} loss {train_step():.4f}")
report("train")

model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
    ce, _ = lm_loss(model, 2 * MB)
print(f"eval loss {ce.item():.4f}")
report("eval")

del model, opt
if device == "cuda":
    torch.cuda.empty_cache()

v3 = LM(v3=True).to(device=device, dtype=torch.bfloat16)
opt = torch.optim.Adafactor(v3.parameters(), lr=1e-2)
v3.train()
for step in range(3):
    ce, _ = lm_loss(v3, 2 * MB)
    ce.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for m in v3.modules():
            if isinstance(m, DeepSeekMoE):
                m.bias += 1e-3 * torch.sign(m.last_load.float().mean() - m.last_load.float())
    print(f"v3 step {step} loss {ce.item():.4f}")
    if step == 0:
        report("v3 first step")
report("v3 train")
