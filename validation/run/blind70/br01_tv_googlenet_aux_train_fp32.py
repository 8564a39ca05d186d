"""torchvision's GoogLeNet with its two auxiliary classifiers (aux_logits=True, init_weights=True),
trained in fp32 on 224x224 images at batch 128 with the main loss plus 0.3 of each auxiliary loss, SGD
with Nesterov momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7001)
B = 2 if SMALL else 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.googlenet(aux_logits=True, init_weights=True).to(device).train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, 224, 224, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    out = model(images)
    loss = F.cross_entropy(out.logits, targets)
    loss = (
        loss
        + 0.3 * F.cross_entropy(out.aux_logits1, targets)
        + 0.3 * F.cross_entropy(out.aux_logits2, targets)
    )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
