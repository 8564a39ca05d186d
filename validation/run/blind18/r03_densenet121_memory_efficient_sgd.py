"""torchvision densenet121 with memory_efficient=True (each dense layer's concatenation and bottleneck
recomputed in backward through torch.utils.checkpoint), fp32, SGD momentum with nesterov, batch 64 at
224 px, 2 steps, then an eval pass under no_grad at batch 128."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1803)
BATCH, RES = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.densenet121(num_classes=1000, memory_efficient=True).to(device).train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    y = torch.randint(0, 1000, (BATCH,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    pred = model(torch.randn(2 * BATCH, 3, RES, RES, device=device)).argmax(1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
