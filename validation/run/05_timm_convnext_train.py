"""timm convnext_atto (pretrained=False) fp32 training with AdamW (foreach default)."""

import os

import timm
import torch
import torch.nn as nn

B, IMG = (2, 64) if os.environ.get("SMOKE") else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = timm.create_model("convnext_atto", pretrained=False, num_classes=10).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
print(f"final loss {loss.item():.3f}")
