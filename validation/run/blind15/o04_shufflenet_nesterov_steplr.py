"""torchvision shufflenet_v2_x1_0 (channel shuffle by view/transpose/contiguous, depthwise convolutions,
BatchNorm), fp32, SGD nesterov with weight decay and a StepLR schedule, batch 192 at 224 px, 3 steps."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1504)
BATCH, RES = (2, 64) if SMALL else (192, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.shufflenet_v2_x1_0(num_classes=1000).to(device).train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True, weight_decay=4e-5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.98)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    y = torch.randint(0, 1000, (BATCH,), device=device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
