"""torch.compile(model, mode="reduce-overhead") (Inductor's CUDA graph trees) of a GELU MLP (4 layers
of 2048, fp32) under torch.no_grad: 4 calls at batch 512 (a warm-up, a recording, two replays), then
4 at batch 1024 (a recompile with a dynamic batch: warm-up, recording, replays), the last output held
at each phase's end; 3 phases (the model, each batch)."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3105)
D, L, B = (32, 2, 8) if SMALL else (2048, 4, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(L) for m in (nn.Linear(D, D), nn.GELU())], nn.Linear(D, D)).to(
    device
)
model = torch.compile(model, mode="reduce-overhead")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    for batch in (B, 2 * B):
        x = torch.randn(batch, D, device=device)
        for _ in range(4):
            y = model(x)
        if device == "cuda":
            print(
                f"batch {batch} peak {torch.cuda.max_memory_allocated()} now {torch.cuda.memory_allocated()}"
            )
            torch.cuda.reset_peak_memory_stats()
