"""An orthogonal RNN as torch.nn.utils.parametrizations.orthogonal builds it: an nn.RNNCell-style
recurrence written by hand whose 1024 x 1024 recurrent matrix is parametrized orthogonal (the
matrix exponential map by default for a square weight), unrolled over 256 steps at batch 64 with a
tanh non-linearity, a linear read-out and cross-entropy at every step; fp32, RMSprop, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3506)
B, T, D, C = (2, 8, 16, 5) if SMALL else (64, 256, 1024, 100)
device = "cuda" if torch.cuda.is_available() else "cpu"


class OrthoRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(C, D)
        self.rec = parametrizations.orthogonal(nn.Linear(D, D, bias=False))
        self.out = nn.Linear(D, C)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], D)
        u = self.inp(x)
        w = self.rec.weight
        logits = []
        for t in range(x.shape[1]):
            h = torch.tanh(u[:, t] + h @ w.T)
            logits.append(self.out(h))
        return torch.stack(logits, 1)


model = OrthoRNN().to(device)
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = F.one_hot(torch.randint(0, C, (B, T), device=device), C).float()
    y = torch.randint(0, C, (B, T), device=device)
    loss = F.cross_entropy(model(x).reshape(-1, C), y.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
