"""torchvision AlexNet (11x11 stride-4 convolution, dropout before two 4,096-wide linears), fp32,
SGD with momentum and weight decay, a MultiStepLR schedule, batch 256 at 224x224, 2 steps; then an
evaluation pass at batch 512 under no_grad; 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7902)
B = 2 if SMALL else 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.alexnet(num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1], gamma=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    top5 = model(torch.randn(2 * B, 3, 224, 224, device=device)).topk(5, dim=1).indices
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
