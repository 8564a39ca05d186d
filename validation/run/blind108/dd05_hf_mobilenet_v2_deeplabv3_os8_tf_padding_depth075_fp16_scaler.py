"""HF MobileNetV2 + DeepLabV3 semantic segmentation built from a config (no download): depth
multiplier 0.75 (24- to 240-channel inverted residuals, expansions to 432 and 720 channels),
output stride 8 (the last stages' depthwise 3x3 convolutions dilated by 2 and 4), TensorFlow
'SAME' padding applied by F.pad before each unpadded convolution, a DeepLabV3 head (image pooling
plus a 1x1 ASPP branch) over 21 classes; batch 8 of 513 x 513 crops with ignore-255 borders, the
model's own loss (bilinear upsampling of the logits, cross entropy), fp16 autocast with GradScaler,
SGD momentum with a poly schedule, 3 steps; then 2 images of 480 x 640 under inference_mode with
the logits upsampled and argmaxed; 5 phases."""

import os

import torch
from transformers import MobileNetV2Config, MobileNetV2ForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10805)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, R, STEPS = (2, 65, 2) if SMALL else (8, 513, 3)
EH, EW = (48, 64) if SMALL else (480, 640)
cfg = MobileNetV2Config(
    depth_multiplier=0.75,
    output_stride=8,
    tf_padding=True,
    num_labels=21,
    image_size=R,
    classifier_dropout_prob=0.1,
    semantic_loss_ignore_index=255,
)
model = MobileNetV2ForSemanticSegmentation(cfg).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=4e-5)
sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=STEPS, power=0.9)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
gen = torch.Generator(device=device).manual_seed(5)


def batch(n, h, w):
    x = torch.randn(n, 3, h, w, device=device, generator=gen)
    lab = torch.randint(0, 21, (n, h, w), device=device, generator=gen)
    lab[:, :, : w // 10] = 255
    return x, lab


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x, lab = batch(B, R, R)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(pixel_values=x, labels=lab).loss
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, lab, loss
model.eval()
with torch.inference_mode():
    x, lab = batch(2, EH, EW)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logits = model(pixel_values=x).logits
    up = torch.nn.functional.interpolate(logits.float(), size=(EH, EW), mode="bilinear", align_corners=False)
    pred = up.argmax(1)
    miou_px = (pred == lab).float().mean()
if device == "cuda":
    print(
        f"eval {miou_px.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
