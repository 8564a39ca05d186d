"""timm's EfficientNet-B0 (drop path 0.2, SE blocks, SiLU) trained from scratch in channels_last:
batch 192 of 224x224, bf16 autocast, RMSprop as timm configures it (alpha 0.9, eps 1e-3, momentum
0.9), label smoothing 0.1, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5605)
B, HW = (2, 64) if SMALL else (192, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("efficientnet_b0", drop_path_rate=0.2).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.016, alpha=0.9, eps=1e-3, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device).to(memory_format=torch.channels_last)
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
