"""torchvision efficientnet_v2_s at 288px, batch 32: bf16 autocast training with AdamW, then del + empty_cache
and no_grad eval at batch 128."""

import gc
import os

import torch
import torch.nn.functional as F
import torchvision

B, IMG, EVAL_B = (2, 64, 4) if os.environ.get("SMOKE") else (32, 288, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(7)

model = torchvision.models.efficientnet_v2_s(num_classes=100).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

# drop the optimizer and the last batch before evaluation, give the cache back
del optimizer, x, y, loss
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
    print(
        f"after empty_cache allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    x = torch.randn(EVAL_B, 3, IMG, IMG, device=device)
    probs = model(x).float().softmax(dim=-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(probs.shape, probs.sum(dim=-1).mean().item())
