"""A TorchScript model trained as older codebases do: a hand-written GRU cell unrolled over 256 steps
inside a `torch.jit.script`ed module (the profiling executor specialises it after its first runs),
a word-level LM over 10,000 words, width 1024, batch 64, fp32, SGD with gradient clipping, 4 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5103)
V, D, B, T = (100, 32, 2, 8) if SMALL else (10000, 1024, 64, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ScriptGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.wx = nn.Linear(D, 3 * D)
        self.wh = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        h = torch.zeros(ids.shape[0], x.shape[2], device=x.device)
        gx = self.wx(x)
        outs = []
        for t in range(ids.shape[1]):
            gh = self.wh(h)
            xr, xz, xn = gx[:, t].chunk(3, 1)
            hr, hz, hn = gh.chunk(3, 1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
            outs.append(h)
        return self.out(torch.stack(outs, 1))


model = torch.jit.script(ScriptGRU().to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda" and step in (1, 3):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
