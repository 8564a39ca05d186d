"""torchvision ConvNeXt-Tiny trained from scratch with CutMix (torchvision.transforms.v2.CutMix on
the GPU batch, soft targets) at batch 64 of 224x224, channels-last under bf16 autocast, AdamW with
a LinearLR warmup chained to cosine by SequentialLR, 2 steps; then channels-last bf16 evaluation of
256 images under inference_mode; 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5803)
B, HW = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.convnext_tiny(num_classes=1000).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)
warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=5)
cos = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cos], milestones=[5])
cutmix = v2.CutMix(num_classes=1000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img = torch.randn(B, 3, HW, HW, device=device)
    label = torch.randint(0, 1000, (B,), device=device)
    img, soft = cutmix(img, label)
    img = img.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(img), soft)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del img, label, soft, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    img = torch.randn(4 * B, 3, HW, HW, device=device).contiguous(memory_format=torch.channels_last)
    top5 = model(img).topk(5, dim=-1).indices
if device == "cuda":
    print(f"eval {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}")
