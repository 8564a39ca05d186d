"""timm mobilevit_xs (MobileNetV2 blocks, unfold-to-patches transformer blocks, fold back) at 256 px,
fp32 weights under bf16 autocast, AdamW with weight decay, label smoothing, batch 64, 2 steps; then
eval under inference_mode at batch 128."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1503)
BATCH, RES = (2, 64) if SMALL else (64, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("mobilevit_xs", num_classes=100).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    y = torch.randint(0, 100, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    out = model(torch.randn(BATCH * 2, 3, RES, RES, device=device))
del out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
