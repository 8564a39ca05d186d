"""torchvision EfficientNetV2-S (fused MBConv stages, squeeze-excitation, stochastic depth in
training) under bf16 autocast, fp32 weights, RMSprop with momentum, batch 48 at 288x288, 2 steps; then
an eval pass at 384x384 under inference_mode; 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7602)
B, S, E = (2, 64, 96) if SMALL else (48, 288, 384)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.efficientnet_v2_s(num_classes=1000).to(device)
optimizer = torch.optim.RMSprop(
    model.parameters(), lr=0.01, alpha=0.9, eps=1e-3, momentum=0.9, weight_decay=1e-5
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    preds = model(torch.randn(B, 3, E, E, device=device)).softmax(-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
