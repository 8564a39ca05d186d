"""torchvision SqueezeNet 1.1 trained in fp32 with a hand-written Lookahead around SGD with momentum
(slow weights cloned once, every k=2 fast steps pulled toward the fast weights with
`torch._foreach_lerp_` and copied back), label smoothing 0.1, batch 128 at 224x224, 4 fast steps;
5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import squeezenet1_1

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8206)
B, R, C = (2, 64, 10) if SMALL else (128, 224, 1000)
K, ALPHA = 2, 0.5
device = "cuda" if torch.cuda.is_available() else "cpu"
model = squeezenet1_1(num_classes=C).to(device)
params = list(model.parameters())
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
slow = [p.detach().clone() for p in params]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if (step + 1) % K == 0:
        with torch.no_grad():
            fast = [p.detach() for p in params]
            torch._foreach_lerp_(slow, fast, ALPHA)
            torch._foreach_copy_(fast, slow)
            del fast
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
