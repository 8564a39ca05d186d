"""torchvision vit_b_32 training under bf16 autocast with SGD momentum, batch 64, 2 steps."""

import os

import torch
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(46)
model = torchvision.models.vit_b_32(image_size=IMG, num_classes=100).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
