"""A DeiT-style ViT-S/16 recipe whose augmentation lives on the GPU: each step a list of decoded
uint8 images of varied sizes (heights and widths 160..400, drawn on the host as a CPU JPEG decoder
gives them) uploaded one by one, each cropped on its own on the GPU with v2 (RandomResizedCrop to
224 with antialias, RandomHorizontalFlip), stacked into a uint8 batch, v2.RandAugment (2 ops at
magnitude 9) on the batch, v2.ToDtype to float32 scaled and v2.Normalize, then v2.CutMix or
v2.MixUp (v2.RandomChoice) with soft targets; timm's vit_small_patch16_224 (drop_path 0.1) under
bf16 autocast, fused AdamW in two weight-decay groups with a warmup-cosine LambdaLR, gradients
clipped at 1.0; batch 128, 5 steps; then evaluation of 2 batches of 256 with v2.Resize(256) and
v2.CenterCrop(224) per image under inference_mode; 5 phases."""

import math
import os

import timm
import torch
import torch.nn.functional as F
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15204)
B, EB, IMG, STEPS, NCLS = (4, 6, 64, 4, 10) if SMALL else (128, 256, 224, 5, 1000)
LO, HI = (48, 96) if SMALL else (160, 400)
device = "cuda" if torch.cuda.is_available() else "cpu"


def decode_batch(n):
    """Stands in for torchvision.io.decode_jpeg(list_of_jpegs) and the upload of each image."""
    sizes = torch.randint(LO, HI + 1, (n, 2)).tolist()
    return [torch.randint(0, 256, (3, h, w), dtype=torch.uint8).to(device) for h, w in sizes]


per_image_train = v2.Compose([v2.RandomResizedCrop(IMG, antialias=True), v2.RandomHorizontalFlip()])
batch_augment = v2.RandAugment(num_ops=2, magnitude=9)
per_image_eval = v2.Compose([v2.Resize(IMG * 8 // 7, antialias=True), v2.CenterCrop(IMG)])
to_float = v2.Compose(
    [
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
mix = v2.RandomChoice([v2.CutMix(num_classes=NCLS), v2.MixUp(num_classes=NCLS, alpha=0.8)])

model = timm.create_model(
    "vit_tiny_patch16_224" if SMALL else "vit_small_patch16_224",
    num_classes=NCLS,
    img_size=IMG,
    drop_path_rate=0.1,
).to(device)
decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "pos_embed" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and "pos_embed" not in n)]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-3,
    fused=device == "cuda",
)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / STEPS))
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images = decode_batch(B)
    labels = torch.randint(0, NCLS, (B,), device=device)
    x = to_float(batch_augment(torch.stack([per_image_train(im) for im in images])))
    del images
    x, soft = mix(x, labels)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = torch.sum(-soft * F.log_softmax(model(x), dim=-1), dim=-1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    del x, soft
    if device == "cuda" and step in (0, 2, 4):
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

model.eval()
top1 = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    for _ in range(2):
        images = decode_batch(EB)
        labels = torch.randint(0, NCLS, (EB,), device=device)
        x = to_float(torch.stack([per_image_eval(im) for im in images]))
        del images
        top1 += int((model(x).argmax(-1) == labels).sum())
        del x
if device == "cuda":
    print(
        f"eval top1 {top1} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
