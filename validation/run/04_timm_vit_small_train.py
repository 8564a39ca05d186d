"""timm vit_small_patch16_224 (pretrained=False) training under bf16 autocast with AdamW."""

import os

import timm
import torch
import torch.nn.functional as F

B, IMG = (2, 32) if os.environ.get("SMOKE") else (32, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=100, img_size=IMG)
model = model.to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
