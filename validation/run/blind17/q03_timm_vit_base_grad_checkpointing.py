"""timm vit_base_patch16_224 with set_grad_checkpointing(), fp32 weights under bf16 autocast,
AdamW(fused=True), batch 64 at 224 px, 2 steps; then eval without gradients at batch 256."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1703)
BATCH = 2 if SMALL else 64
name = "vit_tiny_patch16_224" if SMALL else "vit_base_patch16_224"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model(name, num_classes=1000).to(device).train()
model.set_grad_checkpointing(True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(BATCH, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    out = model(torch.randn(BATCH * 4, 3, 224, 224, device=device))
del out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
