"""SegFormer-B5 on Cityscapes-sized inputs, the MMSegmentation recipe written with transformers: a
SegformerForSemanticSegmentation from a SegformerConfig with the MiT-b5 encoder sizes (depths 3/6/40/3,
hidden sizes 64/128/320/512, decoder 768, 19 classes, random init); training with the model's own
cross-entropy (labels given, ignore index 255 on a border band) under bf16 autocast, AdamW with a poly
schedule; then whole-image inference the way mmseg's slide mode does it and multi-scale + flip testing.

Phases: 0 the model and AdamW (lr 6e-5, head x10, weight decay 0.01); 1 three steps at batch 2 on
1024 x 1024 crops, bf16 autocast; 2 the model cast to fp16 (`.half()`), inference_mode, one 1024 x 2048
image by 1024 x 1024 windows at stride 768 (3 windows), logits upsampled to each window and summed into a
full-size canvas divided by the count map; 3 inference_mode fp16, batch 2 at 512 x 1024 with scales 0.5,
1.0, 1.5 and horizontal flips, softmax probabilities averaged at full size. Seeded; no sizes depend on
values."""

import os

import torch
import torch.nn.functional as F
from transformers import SegformerConfig, SegformerForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3534)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = SegformerConfig(
        depths=[1, 1, 1, 1],
        hidden_sizes=[16, 32, 64, 64],
        num_attention_heads=[1, 2, 2, 4],
        decoder_hidden_size=64,
        num_labels=19,
    )
    B1, CROP, H2, W2, WIN, STRIDE, B3, H3, W3 = 1, 128, 128, 256, 128, 96, 1, 64, 128
else:
    config = SegformerConfig(
        depths=[3, 6, 40, 3],
        hidden_sizes=[64, 128, 320, 512],
        num_attention_heads=[1, 2, 5, 8],
        decoder_hidden_size=768,
        num_labels=19,
    )
    B1, CROP, H2, W2, WIN, STRIDE, B3, H3, W3 = 2, 1024, 1024, 2048, 1024, 768, 2, 512, 1024


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = SegformerForSemanticSegmentation(config).to(device)
head = [p for n, p in model.named_parameters() if n.startswith("decode_head")]
head_ids = {id(p) for p in head}
encoder = [p for p in model.parameters() if id(p) not in head_ids]
opt = torch.optim.AdamW([{"params": encoder, "lr": 6e-5}, {"params": head, "lr": 6e-4}], weight_decay=0.01)
sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=160000, power=1.0)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 segformer mit-b5 + adamw")

model.train()
for step in range(3):
    pixels = torch.randn(B1, 3, CROP, CROP, device=device)
    labels = torch.randint(0, 19, (B1, CROP, CROP), device=device)
    labels[:, :, -32:] = 255
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels, labels=labels)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    opt.step()
    sched.step()
    print(f"train step {step} loss {out.loss.item():.4f}")
del out
report(f"phase1 three steps at batch {B1} x {CROP}^2, bf16 autocast, internal loss")

dtype = torch.float16 if cuda else torch.float32
model.to(dtype).eval()
with torch.inference_mode():
    image = torch.randn(1, 3, H2, W2, device=device, dtype=dtype)
    canvas = torch.zeros(1, 19, H2, W2, device=device, dtype=dtype)
    count = torch.zeros(1, 1, H2, W2, device=device, dtype=dtype)
    lefts = list(range(0, W2 - WIN + 1, STRIDE))
    if lefts[-1] != W2 - WIN:
        lefts.append(W2 - WIN)
    for left in lefts:
        window = image[:, :, :, left : left + WIN]
        logits = model(pixel_values=window).logits
        canvas[:, :, :, left : left + WIN] += F.interpolate(
            logits, size=(H2, WIN), mode="bilinear", align_corners=False
        )
        count[:, :, :, left : left + WIN] += 1
    seg = (canvas / count).argmax(1)
    print(f"sliding windows {len(lefts)}, segmentation {tuple(seg.shape)}")
    del image, canvas, count, logits, seg
report(f"phase2 fp16 sliding window {WIN} stride {STRIDE} over {H2}x{W2}")

with torch.inference_mode():
    images = torch.randn(B3, 3, H3, W3, device=device, dtype=dtype)
    probs = torch.zeros(B3, 19, H3, W3, device=device, dtype=torch.float32)
    for scale in (0.5, 1.0, 1.5):
        scaled = F.interpolate(images, scale_factor=scale, mode="bilinear", align_corners=False)
        for flip in (False, True):
            x = torch.flip(scaled, dims=[3]) if flip else scaled
            logits = model(pixel_values=x).logits
            if flip:
                logits = torch.flip(logits, dims=[3])
            probs += F.interpolate(
                logits.float(), size=(H3, W3), mode="bilinear", align_corners=False
            ).softmax(1)
    seg = probs.argmax(1)
    print(f"multi-scale flip segmentation {tuple(seg.shape)}")
report(f"phase3 fp16 multi-scale 0.5/1.0/1.5 + flip at batch {B3} x {H3}x{W3}")
