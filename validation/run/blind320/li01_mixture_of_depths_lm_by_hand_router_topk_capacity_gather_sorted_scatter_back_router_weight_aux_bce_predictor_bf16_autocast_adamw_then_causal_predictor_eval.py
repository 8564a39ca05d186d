"""Mixture-of-Depths (Raote et al. 2024) written from the paper: a small decoder-only LM whose every
other block routes only the top 12.5% of tokens (per sequence) through attention+MLP. A linear router
scores each token, ``torch.topk`` picks the capacity, the chosen indices are sorted to keep causal order,
tokens are gathered with ``torch.gather``, processed, multiplied by their router weight and written back
with ``scatter`` into the residual stream (the rest skip the block). Because top-k over the sequence is
not causal, a small MLP predictor per routed block learns (BCE on detached hidden states) to predict the
router's top-k membership; at evaluation the predictor's sigmoid > 0.5 decides routing with a fixed
capacity taken by topk over its logits.

Phases: 0 model and data built on the GPU; 1 training with bf16 autocast and AdamW (LM loss + router
aux BCE); 2 evaluation with the top-k router (no_grad); 3 evaluation with the causal predictor routing
(inference_mode) and greedy decoding of 32 tokens for a batch of prompts."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda"

VOCAB, D, H, LAYERS, T, B = 8192, 512, 8, 8, 512, 16
CAPACITY = 0.125


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
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
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def delta(self, x):
        # the block's residual update only (what MoD scales by the router weight)
        return self.forward(x) - x


class MoDBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.router = nn.Linear(D, 1, bias=False)
        self.predictor = nn.Sequential(nn.Linear(D, D // 4), nn.SiLU(), nn.Linear(D // 4, 1))

    def forward(self, x, use_predictor=False):
        b, t, _ = x.shape
        k = max(1, int(t * CAPACITY))
        r = self.router(x).squeeze(-1)  # (b, t)
        p = self.predictor(x.detach()).squeeze(-1)
        if use_predictor:
            # causal decision: keep the top-k of the predictor logits (fixed capacity)
            _, idx = torch.topk(p, k, dim=1, sorted=False)
        else:
            _, idx = torch.topk(r, k, dim=1, sorted=False)
        idx, _ = torch.sort(idx, dim=1)
        gidx = idx.unsqueeze(-1).expand(-1, -1, D)
        xs = torch.gather(x, 1, gidx)
        w = torch.gather(r, 1, idx).unsqueeze(-1)
        upd = self.block.delta(xs) * torch.sigmoid(w)
        out = x.scatter(1, gidx, xs + upd)
        target = torch.zeros_like(r).scatter(1, idx, 1.0)
        aux = F.binary_cross_entropy_with_logits(p.float(), target.float())
        return out, aux


class MoDLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.layers = nn.ModuleList([MoDBlock() if i % 2 else Block() for i in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids, use_predictor=False):
        x = self.emb(ids) + self.pos[: ids.shape[1]]
        aux = x.new_zeros(())
        for layer in self.layers:
            if isinstance(layer, MoDBlock):
                x, a = layer(x, use_predictor)
                aux = aux + a
            else:
                x = layer(x)
        return self.head(self.ln_f(x)), aux


model = MoDLM().to(device)
data = torch.randint(0, VOCAB, (64, T + 1), device=device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / 4) * 0.5 * (1 + math.cos(math.pi * s / 12))
)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")

model.train()
for step in range(12):
    batch = data[torch.randint(0, data.shape[0], (B,), device=device)]
    x, y = batch[:, :-1], batch[:, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits, aux = model(x)
        lm = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
    loss = lm + 0.01 * aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
print("train lm", round(lm.item(), 3), "aux", round(aux.item(), 3))
report("phase1 train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    tot = 0.0
    for i in range(0, 64, 32):
        batch = data[i : i + 32]
        logits, _ = model(batch[:, :-1])
        tot += F.cross_entropy(logits.float().view(-1, VOCAB), batch[:, 1:].reshape(-1)).item()
print("eval topk router", round(tot / 2, 3))
report("phase2 eval_router")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    logits, _ = model(data[:32, :-1], use_predictor=True)
    nll = F.cross_entropy(logits.float().view(-1, VOCAB), data[:32, 1:].reshape(-1)).item()
    ids = data[:8, :64]
    for _ in range(32):
        lg, _ = model(ids, use_predictor=True)
        ids = torch.cat([ids, lg[:, -1].argmax(-1, keepdim=True)], dim=1)
print("eval predictor", round(nll, 3), "generated", tuple(ids.shape))
report("phase3 predictor_generate")
