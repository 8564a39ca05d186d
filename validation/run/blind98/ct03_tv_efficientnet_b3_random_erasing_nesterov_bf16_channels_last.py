"""torchvision EfficientNet-B3 (stochastic depth 0.2) trained from scratch on 1,000 classes under
bf16 autocast in channels_last at 300 x 300: batch 48 made on the GPU, random erasing per image (the
box's size and corner drawn on the GPU with torch.rand, read back with .tolist(), the box filled with
normal noise), cross entropy with label smoothing 0.1, SGD with Nesterov momentum, weight decay off
the BatchNorm and bias parameters (two groups), 3 steps; then eval of 128 images with torch.no_grad
and test-time horizontal-flip averaging; 5 phases."""

import os

import torch
import torch.nn as nn
from torchvision.models import efficientnet_b3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9803)
B, BE, R, NCLS = (4, 8, 64, 10) if SMALL else (48, 128, 300, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = efficientnet_b3(num_classes=NCLS, stochastic_depth_prob=0.2).to(
    device, memory_format=torch.channels_last
)
decay = [p for n, p in model.named_parameters() if p.ndim > 1]
no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
optimizer = torch.optim.SGD(
    [{"params": decay, "weight_decay": 1e-5}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.05,
    momentum=0.9,
    nesterov=True,
)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)


def random_erase(x):
    boxes = torch.rand(x.shape[0], 4, device=device).tolist()
    for i, (s, a, u, v) in enumerate(boxes):
        h = max(1, int(R * (0.1 + 0.3 * s)))
        w = max(1, int(R * (0.1 + 0.3 * a)))
        top, left = int((R - h) * u), int((R - w) * v)
        x[i, :, top : top + h, left : left + w] = torch.randn(3, h, w, device=device)
    return x


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = random_erase(torch.randn(B, 3, R, R, device=device)).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    xe = torch.randn(BE, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    probs = (model(xe).softmax(-1) + model(xe.flip(3)).softmax(-1)) / 2
if device == "cuda":
    print(
        f"eval {tuple(probs.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
