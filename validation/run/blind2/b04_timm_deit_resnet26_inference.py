"""timm inference: deit_tiny_patch16_224 under no_grad at batch 32 then 256; del + empty_cache; timm resnet26
under inference_mode + bf16 autocast at batch 128 (needs timm)."""

import os

import timm
import torch

SMALL, LARGE, CNN_B, IMG = (2, 4, 2, 224) if os.environ.get("SMOKE") else (32, 256, 128, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

vit = timm.create_model("deit_tiny_patch16_224", pretrained=False, num_classes=1000).to(device).eval()
if device == "cuda":
    print(f"deit weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for bs in (SMALL, LARGE):
    with torch.no_grad():
        logits = vit(torch.randn(bs, 3, IMG, IMG, device=device))
        top5 = logits.topk(5, dim=-1).indices
    if device == "cuda":
        print(f"deit {bs}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    print(top5.shape)

del vit, logits, top5
if device == "cuda":
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

cnn = timm.create_model("resnet26", pretrained=False, num_classes=1000).to(device).eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    preds = cnn(torch.randn(CNN_B, 3, IMG, IMG, device=device)).argmax(dim=-1)
preds = preds.cpu()
if device == "cuda":
    print(f"r26 {CNN_B}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
print(preds[:8].tolist())
