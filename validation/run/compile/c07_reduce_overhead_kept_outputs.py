"""Outputs of a reduce-overhead compiled model kept across calls (CUDA graph trees' generations): a
GELU MLP (3 layers of 2048, bf16) under torch.no_grad, batch 2048; 6 calls whose outputs are all kept
in a list (each new call frees the previous call's output blocks in the graph pool: the kept tensors
are overwritten), then 4 calls whose outputs are kept as clones (eager allocations), then 3 calls
each after torch.compiler.cudagraph_mark_step_begin(); 4 phases (the model, each loop)."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3107)
D, L, B = (32, 2, 8) if SMALL else (2048, 3, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(L) for m in (nn.Linear(D, D), nn.GELU())]).to(device, torch.bfloat16)
model = torch.compile(model, mode="reduce-overhead")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
x = torch.randn(B, D, device=device, dtype=torch.bfloat16)
kept, clones = [], []
with torch.no_grad():
    for _ in range(6):
        kept.append(model(x))
    if device == "cuda":
        print(f"kept peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    for _ in range(4):
        clones.append(model(x).clone())
    if device == "cuda":
        print(f"clones peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        y = model(x)
    if device == "cuda":
        print(f"marked peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
