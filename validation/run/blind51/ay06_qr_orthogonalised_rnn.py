"""An orthogonal RNN kept orthogonal by hand: after every optimizer step its 1024 x 1024 recurrent
matrix is replaced by the Q of `torch.linalg.qr`; a tanh RNN over 128 steps at batch 256, fp32,
RMSprop, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5106)
D, B, T = (32, 4, 8) if SMALL else (1024, 256, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
inp = nn.Linear(64, D).to(device)
rec = nn.Parameter(torch.linalg.qr(torch.randn(D, D))[0].to(device))
head = nn.Linear(D, 10).to(device)
optimizer = torch.optim.RMSprop([*inp.parameters(), rec, *head.parameters()], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, T, 64, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    u = inp(x)
    h = torch.zeros(B, D, device=device)
    for t in range(T):
        h = torch.tanh(u[:, t] + h @ rec)
    loss = F.cross_entropy(head(h), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        q, r = torch.linalg.qr(rec)
        rec.copy_(q * torch.sign(torch.diagonal(r))[None])
        del q, r
    del x, y, u, h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
