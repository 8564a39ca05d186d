"""Transfer learning as a user writes it with torchvision's ResNet-50 (channels-last, bf16
autocast): 2 steps of SGD (Nesterov, momentum 0.9) on 1,000 classes at batch 64 x 224 x 224; the
weights saved with safetensors (`safetensors.torch.save` to bytes of the state_dict made
contiguous, as channels-last weights must be) and the model and its optimizer deleted; a fresh
ResNet-50 built on the CPU, its weights read back by `safetensors.torch.load` and loaded, the
classification head swapped for a 37-class Linear, moved to the GPU, everything frozen but layer4
and the head, 2 steps of AdamW (foreach) on those, then the model turned to fp16 by `model.half()`
for a flip-averaged evaluation under inference_mode at batch 128; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from safetensors.torch import load, save

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13402)
B, R = (4, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def step(model, opt, classes):
    x = torch.randn(B, 3, R, R, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


for _ in range(2):
    loss = step(model, opt, 1000)
if device == "cuda":
    print(
        f"pretrain loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

blob = save({k: v.contiguous() for k, v in model.state_dict().items()})
del model, opt, loss
if device == "cuda":
    print(
        f"saved {len(blob)} bytes allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model = torchvision.models.resnet50()
model.load_state_dict(load(blob))
del blob
model.fc = nn.Linear(model.fc.in_features, 37)
model = model.to(device, memory_format=torch.channels_last)
model.requires_grad_(False)
model.layer4.requires_grad_(True)
model.fc.requires_grad_(True)
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.05)
for _ in range(2):
    loss = step(model, opt, 37)
if device == "cuda":
    print(
        f"finetune loss {loss.item():.4f} allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss
model.half().eval()
with torch.inference_mode():
    x = torch.randn(2 * B, 3, R, R, device=device, dtype=torch.half if amp else torch.float)
    x = x.to(memory_format=torch.channels_last)
    if not amp:
        model.float()
    probs = (model(x).softmax(-1) + model(x.flip(-1)).softmax(-1)) / 2
    pred = probs.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
