"""timm `vit_small_patch16_224` (22M; patch-embedding convolution with a bias, whose gradient sums a
channels-last-strided gradient), fp32, AdamW, label smoothing, batch 192, 3 steps; then `no_grad`
eval at batch 512."""

import os

import timm
import torch

B = 4 if os.environ.get("SMOKE") else 192
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(703)
model = timm.create_model("vit_small_patch16_224", num_classes=1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    top5 = model(torch.randn(512 if B > 4 else 8, 3, 224, 224, device=device)).topk(5).indices.cpu()
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
