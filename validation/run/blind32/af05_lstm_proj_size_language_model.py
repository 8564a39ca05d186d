"""An LSTM language model with projections (nn.LSTM(proj_size=256): LSTMP, as in speech and
Google's big-LSTM LMs), 2 layers of 1024 hidden units, batch_first, 30k vocabulary, fp32, batch 32
of 256 tokens, truncated BPTT carrying the detached state between steps, SGD with gradient
clipping, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3205)
V, E, Hd, P, B, S = (64, 16, 32, 8, 2, 12) if SMALL else (30000, 512, 1024, 256, 32, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(V, E).to(device)
lstm = nn.LSTM(E, Hd, num_layers=2, batch_first=True, proj_size=P).to(device)
head = nn.Linear(P, V).to(device)
params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
optimizer = torch.optim.SGD(params, lr=0.5)
state = None
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    out, state = lstm(emb(ids[:, :-1]), state)
    loss = F.cross_entropy(head(out).reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 0.25)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state = tuple(s.detach() for s in state)
    del ids, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
