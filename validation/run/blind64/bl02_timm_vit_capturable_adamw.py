"""timm's ViT-S/16 trained in fp32 with AdamW(capturable=True, foreach=True) and a learning rate
held in a CUDA tensor (the optimizer's step counts live on the GPU), a linear warmup by LambdaLR, and
gradient clipping; 224x224 images at batch 128, 3 steps; 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6402)
B = 2 if SMALL else 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("vit_small_patch16_224", num_classes=1000).to(device)
lr = torch.tensor(1e-3, device=device) if device == "cuda" else 1e-3  # a tensor lr needs capturable
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, capturable=device == "cuda", foreach=True)
warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(B, 3, 224, 224, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(images), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    warmup.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
