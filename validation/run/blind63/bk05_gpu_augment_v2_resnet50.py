"""Data augmentation on the GPU with torchvision.transforms.v2 on batched CUDA uint8 images
(RandomResizedCrop to 224, horizontal flip, ColorJitter, ToDtype with scaling, Normalize), feeding a
torchvision ResNet-50 trained in fp32 at batch 64 with SGD and Nesterov momentum, 2 steps; 3
phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6305)
B, RAW, S = (2, 80, 64) if SMALL else (64, 320, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
augment = v2.Compose(
    [
        v2.RandomResizedCrop(S, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(0.4, 0.4, 0.4),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]
)
model = torchvision.models.resnet50(num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    raw = torch.randint(0, 256, (B, 3, RAW, RAW), dtype=torch.uint8, device=device)
    images = augment(raw)
    targets = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del raw, images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
