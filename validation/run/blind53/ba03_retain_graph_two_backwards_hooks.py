"""Two losses backpropagated one after the other through one graph (`retain_graph=True` on the
first), with tensor hooks (`register_hook`) that rescale the activations' gradients on their way
back; a 10-layer MLP of width 4096 with LayerNorm over batch 4096, fp32, SGD with momentum, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5303)
B, W, L = (16, 32, 2) if SMALL else (4096, 4096, 10)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers = nn.ModuleList([nn.Sequential(nn.Linear(W, W), nn.LayerNorm(W), nn.GELU()) for _ in range(L)])
head_a, head_b = nn.Linear(W, 10), nn.Linear(W, 1)
model = nn.ModuleList([layers, head_a, head_b]).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    h = torch.randn(B, W, device=device)
    for i, layer in enumerate(layers):
        h = layer(h)
        if i % 3 == 0:
            h.register_hook(lambda g: g * 0.5)
    loss_a = F.cross_entropy(head_a(h), torch.randint(0, 10, (B,), device=device))
    loss_b = head_b(h).pow(2).mean()
    loss_a.backward(retain_graph=True)
    loss_b.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del h, loss_a, loss_b
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
