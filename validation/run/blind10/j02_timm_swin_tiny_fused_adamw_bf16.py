"""timm swin_tiny_patch4_window7_224 (shifted windows: roll, window partition, relative position bias),
fp32 weights under bf16 autocast, AdamW(fused=True), label-smoothed cross-entropy, batch 48, 3 steps,
then an eval pass under torch.inference_mode at batch 96."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH = 2 if SMALL else 48
torch.manual_seed(1002)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, depths=(1, 1, 1, 1), embed_dim=32, num_heads=(1, 2, 2, 4), num_classes=10)
else:
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False)
model = model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(BATCH, 3, 224, 224, device=device)
    labels = torch.randint(0, model.num_classes, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    preds = model(torch.randn(2 * BATCH, 3, 224, 224, device=device)).argmax(-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
