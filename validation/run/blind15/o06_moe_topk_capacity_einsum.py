"""A hand-written mixture-of-experts MLP block stack with top-2 routing at a fixed capacity (Switch/GShard
style, so shapes do not depend on the routing): softmax router, torch.topk over experts, one_hot and
cumsum positions, dispatch and combine tensors through einsum, a load-balancing loss; also a top-k over
the vocabulary of the logits for a top-5 accuracy metric. bf16 autocast, AdamW, batch 16 x 256, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1506)
VOCAB, WIDTH, EXPERTS, LAYERS, BATCH, SEQ = (300, 16, 4, 1, 2, 8) if SMALL else (32000, 512, 8, 4, 16, 256)
TOPK, CAPACITY_FACTOR = 2, 1.25
device = "cuda" if torch.cuda.is_available() else "cpu"


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.router = nn.Linear(WIDTH, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.randn(EXPERTS, WIDTH, 4 * WIDTH) * 0.02)
        self.w2 = nn.Parameter(torch.randn(EXPERTS, 4 * WIDTH, WIDTH) * 0.02)

    def forward(self, x):
        b, t, d = x.shape
        tokens = self.ln(x).reshape(b * t, d)
        n = tokens.shape[0]
        cap = int(CAPACITY_FACTOR * n * TOPK / EXPERTS)
        probs = self.router(tokens).float().softmax(-1)
        gate, expert = torch.topk(probs, TOPK, dim=-1)
        mask = F.one_hot(expert, EXPERTS).float()  # n, k, E
        position = (torch.cumsum(mask.reshape(n * TOPK, EXPERTS), 0).reshape(n, TOPK, EXPERTS) - 1) * mask
        keep = mask * (position < cap).float()
        slot = F.one_hot(position.long().clamp(max=cap - 1), cap).float() * keep.unsqueeze(-1)  # n, k, E, C
        combine = (gate.unsqueeze(-1).unsqueeze(-1) * slot).sum(1)  # n, E, C
        dispatch = (combine > 0).to(tokens.dtype)
        expert_in = torch.einsum("nec,nd->ecd", dispatch, tokens)
        h = F.gelu(torch.bmm(expert_in, self.w1.to(expert_in.dtype)))
        expert_out = torch.bmm(h, self.w2.to(h.dtype))
        y = torch.einsum("nec,ecd->nd", combine.to(expert_out.dtype), expert_out)
        aux = (mask.sum(1).mean(0) * probs.mean(0)).sum() * EXPERTS
        return x + y.reshape(b, t, d), aux


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(MoE() for _ in range(LAYERS))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        x, aux = self.emb(ids), 0.0
        for layer in self.layers:
            x, a = layer(x)
            aux = aux + a
        return self.head(x), aux


model = Model().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, aux = model(ids[:, :-1])
    target = ids[:, 1:].reshape(-1)
    flat = logits.float().reshape(-1, VOCAB)
    loss = F.cross_entropy(flat, target) + 0.01 * aux
    loss.backward()
    with torch.no_grad():
        top5 = torch.topk(flat, 5, dim=-1).indices
        acc = (top5 == target[:, None]).any(-1).float().mean()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del logits, flat, top5, acc
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
