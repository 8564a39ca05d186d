"""HF MobileViTV2ForSemanticSegmentation (MobileViTV2-1.0: separable linear self-attention blocks
over unfolded 2x2 patches, a DeepLabV3 ASPP head, 21 classes) trained on 512x512 crops with
labels holding 255 (ignored) borders, under fp16 autocast with a GradScaler, SGD with momentum and
a polynomial schedule, batch 8, 2 steps; then sliding-window inference of two 512x1024 images
under inference_mode; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import MobileViTV2Config, MobileViTV2ForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8404)
if SMALL:
    config = MobileViTV2Config(image_size=64, width_multiplier=0.5, aspp_out_channels=32, num_labels=21)
    B, S = 2, 64
else:
    config = MobileViTV2Config(image_size=512, width_multiplier=1.0, num_labels=21)
    B, S = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MobileViTV2ForSemanticSegmentation(config).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=100, power=0.9)
scaler = torch.amp.GradScaler(device, init_scale=1024.0, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    image = torch.randn(B, 3, S, S, device=device)
    labels = torch.randint(0, 21, (B, S, S), device=device)
    labels[:, :16] = 255
    labels[:, :, -16:] = 255
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(pixel_values=image, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(2):
        image = torch.randn(1, 3, S, 2 * S, device=device)
        probs = torch.zeros(1, 21, S, 2 * S, device=device)
        for x0 in range(0, S + 1, S // 2):
            logits = model(pixel_values=image[..., x0 : x0 + S]).logits
            probs[..., x0 : x0 + S] += F.interpolate(logits, size=(S, S), mode="bilinear").softmax(1)
        pred = probs.argmax(1)
if device == "cuda":
    print(f"slide peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
