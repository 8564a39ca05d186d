"""torchvision efficientnet_b2 (weights=None, 1000 classes, stochastic depth) trained the way the
torchvision reference recipe does it: channels_last model and inputs, bf16 autocast, AdamW without weight
decay on norm/bias parameters, label smoothing, a model EMA kept with `torch.optim.swa_utils.AveragedModel`
(`get_ema_multi_avg_fn`), batch 96 at 288 px, 3 steps; then the EMA model is evaluated under `no_grad`."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

B, IMG, CLASSES = (2, 64, 10) if os.environ.get("SMOKE") else (96, 288, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(504)

model = torchvision.models.efficientnet_b2(weights=None, num_classes=CLASSES)
model = model.to(device, memory_format=torch.channels_last)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
norm_params, other_params = [], []
for m in model.modules():
    for p in m.parameters(recurse=False):
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or p.ndim <= 1:
            norm_params.append(p)
        else:
            other_params.append(p)
optimizer = torch.optim.AdamW(
    [{"params": other_params, "weight_decay": 0.05}, {"params": norm_params, "weight_decay": 0.0}],
    lr=1e-3,
)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9998), use_buffers=True)
if device == "cuda":
    print(f"model+ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, CLASSES, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        output = model(images)
        loss = F.cross_entropy(output, target, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    ema.update_parameters(model)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

ema.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        images = torch.randn(2 * B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, CLASSES, (2 * B,), device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            pred = ema(images).argmax(dim=1)
        correct += (pred == target).sum().item()
print(f"ema top1 {correct / (4 * B):.3f}")
if device == "cuda":
    print(
        f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
