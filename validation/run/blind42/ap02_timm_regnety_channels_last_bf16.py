"""Image-classification training of timm's RegNetY-1.6GF (group convolutions and
squeeze-excitation, no weights) channels-last under bf16 autocast, SGD with Nesterov momentum and
label smoothing, batch 64 at 224x224, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4202)
B, H = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("regnety_016", pretrained=False, num_classes=1000)
model = model.to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, H, H, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
