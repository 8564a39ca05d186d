"""DistributedDataParallel in a single process (world size 1: NCCL on the GPU, gloo on the CPU) over
an 8-layer MLP 4,096 wide, fp32, batch 1,024, gradient buckets of 25 MiB, AdamW, 3 steps; 4 phases
(model and optimizer built, then one per step)."""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6704)
W, N, B = (32, 2, 4) if SMALL else (4096, 8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group(
    "nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=0, world_size=1
)
layers = []
for _ in range(N):
    layers += [nn.Linear(W, W), nn.GELU()]
model = nn.Sequential(*layers, nn.Linear(W, 10)).to(device)
model = DDP(model, device_ids=[0] if device == "cuda" else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, W, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
