"""A Performer-style language model written by hand: FAVOR+ positive random features (a fixed
Gaussian projection per layer, exp features with a stabilizer), causal linear attention by prefix
sums (torch.cumsum over the keys' outer products with the values) and a running normalizer; 512
wide, 6 layers, 8 heads of 64 with 128 features, batch 8 of 1,024 tokens, fp32, AdamW, 2 steps; 3
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6503)
V, D, H, M, NL, B, L = (100, 32, 2, 8, 2, 2, 16) if SMALL else (32000, 512, 8, 128, 6, 8, 1024)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.register_buffer("proj", torch.randn(H, D // H, M))

    def features(self, x):
        x = x * (D // H) ** -0.25
        u = torch.einsum("bhld,hdm->bhlm", x, self.proj)
        return torch.exp(u - x.pow(2).sum(-1, keepdim=True) / 2 - u.amax(-1, keepdim=True).detach()) + 1e-6

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        qf, kf = self.features(q), self.features(k)
        kv = torch.cumsum(torch.einsum("bhlm,bhld->bhlmd", kf, v), dim=2)
        num = torch.einsum("bhlm,bhlmd->bhld", qf, kv)
        den = torch.einsum("bhlm,bhlm->bhl", qf, torch.cumsum(kf, dim=2))
        a = (num / den[..., None]).transpose(1, 2).reshape(b, n, D)
        x = x + self.out(a)
        return x + self.ff(self.n2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(NL))
        self.head = nn.Linear(D, V)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Model().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    loss = F.cross_entropy(model(ids[:, :-1]).reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
