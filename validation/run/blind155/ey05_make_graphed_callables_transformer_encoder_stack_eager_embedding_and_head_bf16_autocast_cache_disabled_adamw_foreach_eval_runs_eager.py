"""torch.cuda.make_graphed_callables on a module, as its documentation writes it: the middle of a
sequence classifier, an nn.TransformerEncoder of 3 pre-norm layers (batch_first, 768 wide, 12 heads,
feed-forward 3,072, dropout 0.1), is graphed (forward and backward captured from a sample input that
requires grad), while the token and position embeddings, the pooling, the classifier head and the loss
run eagerly around it; bf16 autocast with cache_enabled=False (as make_graphed_callables asks), AdamW
(foreach), batch 64 x 384 tokens, 3 steps; then model.eval() and an evaluation batch of 128 under
no_grad, where the graphed module runs its ordinary forward (the graphs were captured in training
mode). 6 phases: the model, the graphing, each step, the evaluation (eager throughout on the CPU)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15505)
if SMALL:
    V, S, D, H, L, B, EB, NCLS = 256, 16, 64, 4, 2, 4, 8, 5
else:
    V, S, D, H, L, B, EB, NCLS = 50000, 384, 768, 12, 3, 64, 128, 20
device = "cuda" if torch.cuda.is_available() else "cpu"

embed = nn.Embedding(V, D).to(device)
pos = nn.Parameter(torch.randn(1, S, D, device=device) * 0.02)
layer = nn.TransformerEncoderLayer(
    D, H, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
)
encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False).to(device)
head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, NCLS)).to(device)
params = list(embed.parameters()) + [pos] + list(encoder.parameters()) + list(head.parameters())
optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    sample = torch.randn(B, S, D, device=device, requires_grad=True)
    with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False):
        encoder = torch.cuda.make_graphed_callables(encoder, (sample,))
    del sample
    print(
        f"graphed peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, S), device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False):
        x = embed(ids) + pos
        h = encoder(x)
        loss = F.cross_entropy(head(h.mean(dim=1)), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, y, x, h, loss
encoder.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, V, (EB, S), device=device)
    pred = head(encoder(embed(ids) + pos).mean(dim=1)).argmax(-1)
if device == "cuda":
    print(
        f"eval {pred.shape[0]} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
