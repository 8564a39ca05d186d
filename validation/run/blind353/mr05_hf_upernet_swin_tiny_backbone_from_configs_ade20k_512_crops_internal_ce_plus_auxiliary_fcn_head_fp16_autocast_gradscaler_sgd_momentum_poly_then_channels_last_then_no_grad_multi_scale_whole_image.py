"""UperNet with a Swin-T backbone, built the way transformers' UperNet docs show it: a SwinConfig
(embed 96, depths 2/2/6/2, window 7, out_features stage1..stage4) passed as `backbone_config` of an
UperNetConfig with the auxiliary FCN head on (150 ADE20K classes, random init); training uses the model's
own loss (cross-entropy on the main head plus 0.4 x the auxiliary head, ignore index 255) under fp16
autocast with a GradScaler and SGD momentum 0.9 with a poly schedule.

Phases: 0 the model and SGD (lr 0.01, weight decay 5e-4); 1 three steps at batch 8 on 512 x 512 crops,
fp16 autocast + GradScaler, clip_grad_norm_ 1.0 after unscale_; 2 the same model and optimizer with
channels_last inputs and weights, three more steps; 3 eval under no_grad and fp16 autocast, whole-image
inference at batch 2 on 512 x 683 images (ADE20K's short side 512) at scales 0.75, 1.0, 1.25, logits
upsampled to the image and summed. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from transformers import SwinConfig, UperNetConfig, UperNetForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3535)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    swin = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 2, 2, 4],
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = UperNetConfig(backbone_config=swin, hidden_size=32, auxiliary_channels=16, num_labels=150)
    B1, CROP, B3, H3, W3 = 2, 64, 1, 64, 86
else:
    swin = SwinConfig(
        embed_dim=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = UperNetConfig(backbone_config=swin, hidden_size=512, auxiliary_channels=256, num_labels=150)
    B1, CROP, B3, H3, W3 = 8, 512, 2, 512, 683


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


model = UperNetForSemanticSegmentation(config).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=160000, power=1.0)
scaler = torch.amp.GradScaler("cuda", enabled=cuda)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 upernet swin-t + sgd")


def train_steps(memory_format):
    model.train()
    for step in range(3):
        pixels = torch.randn(B1, 3, CROP, CROP, device=device).contiguous(memory_format=memory_format)
        labels = torch.randint(0, 150, (B1, CROP, CROP), device=device)
        labels[:, :16] = 255
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
            out = model(pixel_values=pixels, labels=labels)
        opt.zero_grad(set_to_none=True)
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        sched.step()
        print(f"step {step} loss {out.loss.item():.4f}")


train_steps(torch.contiguous_format)
report(f"phase1 three fp16 autocast + GradScaler steps at batch {B1} x {CROP}^2")

model.to(memory_format=torch.channels_last)
train_steps(torch.channels_last)
report(f"phase2 channels_last, three more steps at batch {B1}")

model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    images = torch.randn(B3, 3, H3, W3, device=device)
    total = torch.zeros(B3, 150, H3, W3, device=device)
    for scale in (0.75, 1.0, 1.25):
        scaled = F.interpolate(images, scale_factor=scale, mode="bilinear", align_corners=False)
        logits = model(pixel_values=scaled).logits
        total += F.interpolate(logits, size=(H3, W3), mode="bilinear", align_corners=False).float()
    seg = total.argmax(1)
    print(f"multi-scale segmentation {tuple(seg.shape)}")
report(f"phase3 no_grad fp16 autocast multi-scale 0.75/1.0/1.25 at batch {B3} x {H3}x{W3}")
