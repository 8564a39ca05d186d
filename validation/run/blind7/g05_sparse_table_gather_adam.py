"""A recommender-style model: a 1M x 64 fp32 table gathered by plain indexing (`table[idx]`: its
backward accumulates with `index_put_`), 131,072 lookups a step through a 3-layer MLP with a
dot-product head, Adam (foreach), 3 steps; then scoring 1M candidates under `no_grad`."""

import os

import torch

ROWS, DIM, BATCH = (1000, 8, 64) if os.environ.get("SMOKE") else (1_000_000, 64, 131_072)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(705)
table = torch.nn.Parameter(torch.randn(ROWS, DIM, device=device) * 0.01)
mlp = torch.nn.Sequential(
    torch.nn.Linear(2 * DIM, 512),
    torch.nn.ReLU(),
    torch.nn.Linear(512, 256),
    torch.nn.ReLU(),
    torch.nn.Linear(256, DIM),
).to(device)
optimizer = torch.optim.Adam([table, *mlp.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    users = torch.randint(0, ROWS, (BATCH,), device=device)
    items = torch.randint(0, ROWS, (BATCH,), device=device)
    pair = torch.cat([table[users], table[items]], dim=1)
    score = (mlp(pair) * table[items]).sum(-1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(score, torch.rand(BATCH, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    best = (table @ table[0]).topk(100).indices
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
