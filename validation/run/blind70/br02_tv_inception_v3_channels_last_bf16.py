"""torchvision's Inception-v3 (aux_logits=True, asymmetric 1x7/7x1 convolutions) in channels-last
memory format under bf16 autocast, 299x299 images at batch 64, the main loss plus 0.4 of the auxiliary
one, RMSprop, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7002)
B = 2 if SMALL else 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.inception_v3(aux_logits=True, init_weights=True)
model = model.to(device=device, memory_format=torch.channels_last).train()
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.045, alpha=0.9, eps=1.0, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, 299, 299, device=device).contiguous(memory_format=torch.channels_last)
    targets = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(images)
        loss = F.cross_entropy(out.logits, targets) + 0.4 * F.cross_entropy(out.aux_logits, targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
