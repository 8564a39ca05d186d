"""timm's EVA-02 Small (eva02_small_patch14_224: rotary position embeddings, SwiGLU, sub-LN) trained
under bf16 autocast on 224x224 images at batch 128, AdamW, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7104)
B = 2 if SMALL else 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("eva02_small_patch14_224", num_classes=1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, 224, 224, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
