"""timm convnextv2_atto (depthwise 7x7 convolutions, LayerNorm2d, GRN) trained from scratch at
224x224, batch 64, fp32 weights under bf16 autocast, AdamW (foreach) with weight decay, label
smoothing cross-entropy, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3002)
B, R = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("convnextv2_atto", num_classes=1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
