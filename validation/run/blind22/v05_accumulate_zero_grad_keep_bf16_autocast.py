"""A pre-LN transformer classifier (512 wide, 8 layers, 8 heads, nn.TransformerEncoderLayer with
batch_first and GELU) in fp32 under bf16 autocast, 4 micro-batches per step accumulated into
gradients that zero_grad(set_to_none=False) keeps (zeroed in place), SGD with momentum and Nesterov,
batch 16 x 384 per micro-batch, 2 steps; 9 phases (one per micro-batch and the model)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2205)
B, T, W, H, DEPTH = (2, 8, 32, 4, 1) if SMALL else (16, 384, 512, 8, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = nn.TransformerEncoderLayer(
    W, H, 4 * W, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
)
model = nn.Sequential(nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False), nn.Linear(W, 10)).to(
    device
)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for micro in range(4):
        x = torch.randn(B, T, W, device=device)
        y = torch.randint(0, 10, (B,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x)[:, 0].float(), y) / 4
        loss.backward()
        if micro == 3:
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
        if device == "cuda":
            print(f"step {step}.{micro} peak {torch.cuda.max_memory_allocated()}")
            torch.cuda.reset_peak_memory_stats()
