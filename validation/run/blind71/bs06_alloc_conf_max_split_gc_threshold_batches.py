"""PYTORCH_CUDA_ALLOC_CONF set by the script itself before torch is imported
(max_split_size_mb:256, garbage_collection_threshold:0.6), a 6-layer transformer encoder (1,024 wide)
trained in fp32 on batches whose sequence length changes each step (384, 1,024, 640, 896 tokens at
batch 16), Adam, 4 steps; 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:256,garbage_collection_threshold:0.6"

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7106)
D, N, B = (32, 2, 2) if SMALL else (1024, 6, 16)
LENGTHS = [8, 16, 12, 14] if SMALL else [384, 1024, 640, 896]
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = nn.TransformerEncoderLayer(D, 16 if not SMALL else 2, 4 * D, dropout=0.1, batch_first=True)
model = nn.TransformerEncoder(layer, N, enable_nested_tensor=False).to(device)
head = nn.Linear(D, 1).to(device)
optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step, length in enumerate(LENGTHS):
    x = torch.randn(B, length, D, device=device)
    loss = head(model(x)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
