"""torchvision's vit_b_16 in fp16 evaluated under torch.inference_mode (nn.MultiheadAttention's fast
path), 224x224 images, 3 batches of 256, outputs kept on the GPU between batches; 4 phases."""

import os

import torch
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6706)
B = 2 if SMALL else 256
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = torchvision.models.vit_b_16().to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
outputs = []
with torch.inference_mode():
    for i in range(3):
        images = torch.randn(B, 3, 224, 224, device=device, dtype=dtype)
        outputs.append(model(images).softmax(-1))
        del images
        if device == "cuda":
            print(
                f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(f"outputs {len(outputs)}")
