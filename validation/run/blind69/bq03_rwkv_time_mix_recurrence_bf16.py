"""An RWKV-style recurrent LM written by hand: token shift, a WKV recurrence run as a Python loop over
256 time steps (exponential decay state per channel), channel mix with squared ReLU, 6 layers 1,024 wide,
batch 16, bf16 weights with the recurrence in fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6903)
V, D, N, B, T = (100, 32, 2, 2, 8) if SMALL else (16384, 1024, 6, 16, 256)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.mix_k = nn.Parameter(torch.full((D,), 0.5))
        self.mix_v = nn.Parameter(torch.full((D,), 0.5))
        self.mix_r = nn.Parameter(torch.full((D,), 0.5))
        self.decay = nn.Parameter(torch.linspace(-5, 1, D))
        self.first = nn.Parameter(torch.zeros(D))
        self.key, self.value = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.recep, self.out = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.ck, self.cv = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def time_mix(self, x):
        prev = F.pad(x, (0, 0, 1, -1))
        k = self.key(x * self.mix_k + prev * (1 - self.mix_k)).float()
        v = self.value(x * self.mix_v + prev * (1 - self.mix_v)).float()
        r = torch.sigmoid(self.recep(x * self.mix_r + prev * (1 - self.mix_r))).float()
        w = -torch.exp(self.decay.float())
        num = torch.zeros(x.shape[0], D, device=x.device)
        den = torch.zeros(x.shape[0], D, device=x.device)
        outs = []
        for t in range(x.shape[1]):
            kt, vt = k[:, t], v[:, t]
            e = torch.exp(self.first.float() + kt)
            outs.append((num + e * vt) / (den + e))
            num = torch.exp(w) * num + torch.exp(kt) * vt
            den = torch.exp(w) * den + torch.exp(kt)
        wkv = torch.stack(outs, dim=1)
        return self.out((r * wkv).to(x.dtype))

    def forward(self, x):
        x = x + self.time_mix(self.ln1(x))
        h = self.ln2(x)
        return x + self.cv(torch.relu(self.ck(h)) ** 2)


class RWKV(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(N))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = RWKV().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
