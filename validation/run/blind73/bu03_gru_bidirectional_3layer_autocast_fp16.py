"""A 3-layer bidirectional GRU (hidden 768, dropout 0.2 between layers) over 512-wide inputs of 400
steps at batch 64, batch-first, under fp16 autocast (cuDNN's RNN in half), a linear head on every step,
Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7303)
IN, H, B, T = (16, 32, 2, 10) if SMALL else (512, 768, 64, 400)
device = "cuda" if torch.cuda.is_available() else "cpu"
gru = nn.GRU(IN, H, num_layers=3, bidirectional=True, dropout=0.2, batch_first=True).to(device)
head = nn.Linear(2 * H, 40).to(device)
optimizer = torch.optim.Adam([*gru.parameters(), *head.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, IN, device=device)
    y = torch.randint(0, 40, (B, T), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16 if device == "cuda" else torch.bfloat16):
        out, _ = gru(x)
        logits = head(out)
    loss = nn.functional.cross_entropy(logits.float().reshape(-1, 40), y.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, out, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
