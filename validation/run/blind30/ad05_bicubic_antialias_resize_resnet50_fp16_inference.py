"""GPU preprocessing then inference: uint8 images of 3x512x640 are resized on the GPU with
F.interpolate(bicubic, antialias=True) to 224x224, normalized, and classified by a torchvision
resnet50 in fp16 under inference_mode, batch 64, three batches; 2 phases (load, infer)."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3005)
B, H, W, R = (2, 64, 80, 32) if SMALL else (64, 512, 640, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = torchvision.models.resnet50().to(device=device, dtype=dtype).eval()
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
top = []
with torch.inference_mode():
    for _ in range(3):
        img = torch.randint(0, 256, (B, 3, H, W), dtype=torch.uint8, device=device)
        x = F.interpolate(img.float(), size=(R, R), mode="bicubic", antialias=True, align_corners=False)
        x = ((x / 255.0 - mean) / std).to(dtype)
        top.append(model(x).argmax(dim=1))
        del img, x
print(len(top))
if device == "cuda":
    print(f"infer peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
