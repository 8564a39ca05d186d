"""timm MaxViT-T (MBConv blocks with squeeze-excite, block and grid attention with relative
position bias) trained from scratch under bf16 autocast, AdamW (foreach), label-smoothed cross
entropy, batch 32 at 224x224, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4302)
B = 2 if SMALL else 32
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("maxvit_tiny_tf_224", pretrained=False, num_classes=100).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
