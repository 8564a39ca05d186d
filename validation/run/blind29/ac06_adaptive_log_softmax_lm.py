"""A word-level LSTM-free language model head: nn.AdaptiveLogSoftmaxWithLoss over a 267k vocabulary
(cutoffs 20k, 60k, 200k; div_value 4) on 1024-wide states from a two-layer MLP, batch of 32768
targets drawn Zipf-like so every cluster is hit, fp32, Adagrad, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2906)
V, CUT, D, N = (100, [10, 30, 60], 16, 64) if SMALL else (267_735, [20_000, 60_000, 200_000], 1024, 32768)
device = "cuda" if torch.cuda.is_available() else "cpu"
body = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D)).to(device)
head = nn.AdaptiveLogSoftmaxWithLoss(D, V, cutoffs=CUT, div_value=4.0).to(device)
optimizer = torch.optim.Adagrad([*body.parameters(), *head.parameters()], lr=0.01)
ranks = torch.arange(1, V + 1, dtype=torch.float)
probs = 1.0 / ranks
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(N, D, device=device)
    targets = torch.multinomial(probs, N, replacement=True).to(device)
    out = head(body(x), targets)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, targets, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
