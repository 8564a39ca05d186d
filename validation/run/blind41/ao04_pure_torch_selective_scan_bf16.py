"""A Mamba-style selective state-space layer written in plain PyTorch (no CUDA kernels): input-
dependent step sizes through softplus, discretised A and B by exp and einsum, the recurrence as a
chunked loop with cumulative products over 64-step chunks, a gated output; bf16 weights, AdamW
(foreach), 768 wide, state 16, 4 layers, batch 4 at 512 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4104)
V, D, N, L, B, S, C = (64, 16, 4, 2, 2, 16, 4) if SMALL else (32000, 768, 16, 4, 4, 512, 64)
E = 2 * D


class SSM(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(D)
        self.inp = nn.Linear(D, 2 * E, bias=False)
        self.dt = nn.Linear(E, E)
        self.bc = nn.Linear(E, 2 * N, bias=False)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, N + 1).float()).repeat(E, 1))
        self.out = nn.Linear(E, D, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        u, z = self.inp(self.norm(x)).chunk(2, dim=-1)
        u = F.silu(u)
        dt = F.softplus(self.dt(u))
        bm, cm = self.bc(u).chunk(2, dim=-1)
        a = -torch.exp(self.a_log.float())
        h = torch.zeros(b, E, N, device=x.device, dtype=torch.float32)
        ys = []
        for t0 in range(0, s, C):
            dA = torch.exp(torch.einsum("bte,en->bten", dt[:, t0 : t0 + C].float(), a))
            dBu = torch.einsum(
                "bte,btn,bte->bten",
                dt[:, t0 : t0 + C].float(),
                bm[:, t0 : t0 + C].float(),
                u[:, t0 : t0 + C].float(),
            )
            decay = torch.cumprod(dA, dim=1)
            states = decay * (h.unsqueeze(1) + torch.cumsum(dBu / decay.clamp_min(1e-12), dim=1))
            ys.append(torch.einsum("bten,btn->bte", states, cm[:, t0 : t0 + C].float()))
            h = states[:, -1]
        y = torch.cat(ys, dim=1).to(x.dtype) * F.silu(z)
        return x + self.out(y)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(SSM() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = LM().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
