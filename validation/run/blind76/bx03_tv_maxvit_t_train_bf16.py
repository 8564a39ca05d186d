"""torchvision MaxViT-T (MBConv plus block and grid attention with relative position bias) under bf16
autocast, fp32 weights, AdamW, batch 32 at 224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7603)
B = 2 if SMALL else 32
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.maxvit_t(num_classes=1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
