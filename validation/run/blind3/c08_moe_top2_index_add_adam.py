"""Hand-written mixture-of-experts MLP layers (softmax router, top-2 via torch.topk, per-expert gather,
index_add_ scatter, load-balancing loss), fp32, Adam."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, HIDDEN, EXPERTS, LAYERS, TOKENS, CLASSES = (
    (32, 64, 4, 2, 64, 10) if os.environ.get("SMOKE") else (1024, 4096, 8, 4, 16384, 1000)
)
TOP_K = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(99)


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MoELayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))

    def forward(self, x):
        h = self.norm(x)
        probs = self.router(h).softmax(dim=-1)
        weights, chosen = torch.topk(probs, TOP_K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(chosen == e)
            if token_idx.numel() == 0:
                continue
            y = expert(h[token_idx]) * weights[token_idx, slot].unsqueeze(-1)
            out.index_add_(0, token_idx, y)
        frac = F.one_hot(chosen, EXPERTS).float().sum(dim=(0, 1)) / (x.shape[0] * TOP_K)
        aux = EXPERTS * (frac * probs.mean(dim=0)).sum()
        return x + out, aux


class MoENet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(256, DIM)
        self.layers = nn.ModuleList(MoELayer() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.inp(x)
        aux = x.new_zeros(())
        for layer in self.layers:
            x, a = layer(x)
            aux = aux + a
        return self.head(x), aux


model = MoENet().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(TOKENS, 256, device=device)
    y = torch.randint(0, CLASSES, (TOKENS,), device=device)
    logits, aux = model(x)
    loss = F.cross_entropy(logits, y) + 0.01 * aux
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
