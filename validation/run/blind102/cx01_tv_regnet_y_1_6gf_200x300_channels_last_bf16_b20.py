"""torchvision RegNetY-1.6GF (grouped 3x3 convolutions, squeeze-excitation) fine-tuned on
200 x 300 landscape photos, channels-last, bf16 autocast, SGD with Nesterov momentum and a
cosine schedule, label smoothing 0.1; batch 20, 3 training steps, then an inference_mode
evaluation of 24 images at 200 x 300; 5 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10201)
B, H, W, STEPS, NCLS = (2, 40, 60, 2, 10) if SMALL else (20, 200, 300, 3, 102)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.regnet_y_1_6gf(num_classes=NCLS).to(device)
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, H, W, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = crit(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(B + 4, 3, H, W, device=device).contiguous(memory_format=torch.channels_last)
    top5 = model(x).float().softmax(-1).topk(5, dim=-1).indices
if device == "cuda":
    print(
        f"eval {top5.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
