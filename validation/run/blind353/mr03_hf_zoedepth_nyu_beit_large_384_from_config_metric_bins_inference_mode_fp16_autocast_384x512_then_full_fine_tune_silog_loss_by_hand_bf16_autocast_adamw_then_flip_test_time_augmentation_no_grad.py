"""ZoeDepth (NYU head: one metric-bins configuration, 64 bins from 0.001 to 10 m) from `ZoeDepthConfig()`:
its default BEiT-large backbone at 384 with four out stages, the DPT neck and the attractor / bin heads,
random init. Metric depth fine-tuning the way the ZoeDepth repository trains it, written by hand: the
scale-invariant log loss (SILog, lambda 0.85, times 10) on valid pixels (a 0/1 mask multiplied in, no
boolean indexing), the prediction upsampled bilinearly to the label size.

Phases: 0 the model; 1 inference_mode under fp16 autocast at batch 4 on 384 x 512 images (the image
processor's keep-aspect size), twice; 2 AdamW (lr 1.6e-4 heads, 1.6e-5 backbone, weight decay 0.01) and
three full fine-tuning steps at batch 2 on 384 x 384 crops under bf16 autocast, clip_grad_norm_ 0.1;
3 the ZoeDepth evaluation protocol: no_grad, each image and its horizontal flip, the two depths averaged,
batch 2 at 384 x 512 in fp32. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from transformers import BeitConfig, ZoeDepthConfig, ZoeDepthForDepthEstimation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3533)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    backbone = BeitConfig(
        image_size=64,
        num_hidden_layers=4,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        use_relative_position_bias=True,
        reshape_hidden_states=False,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = ZoeDepthConfig(
        backbone_config=backbone,
        backbone_hidden_size=64,
        fusion_hidden_size=32,
        neck_hidden_sizes=[32, 32, 64, 64],
        bottleneck_features=32,
    )
    B1, H, W, B2, CROP, B3 = 1, 64, 96, 1, 64, 1
else:
    config = ZoeDepthConfig()
    B1, H, W, B2, CROP, B3 = 4, 384, 512, 2, 384, 2


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


def silog(pred, target, valid, lam=0.85):
    pred = F.interpolate(
        pred.unsqueeze(1).float(), size=target.shape[-2:], mode="bilinear", align_corners=True
    )
    g = (torch.log(pred.squeeze(1).clamp_min(1e-3)) - torch.log(target)) * valid
    n = valid.sum()
    return 10 * torch.sqrt((g**2).sum() / n - lam * (g.sum() / n) ** 2 + 1e-6)


model = ZoeDepthForDepthEstimation(config).to(device)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 zoedepth beit-large")

model.eval()
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for _ in range(2):
        depth = model(pixel_values=torch.randn(B1, 3, H, W, device=device)).predicted_depth
        print(f"predicted depth {tuple(depth.shape)} mean {depth.float().mean().item():.3f}")
        del depth
report(f"phase1 inference_mode fp16 autocast at batch {B1} x {H}x{W}")

backbone_params = list(model.backbone.parameters())
backbone_ids = {id(p) for p in backbone_params}
heads = [p for p in model.parameters() if id(p) not in backbone_ids]
opt = torch.optim.AdamW(
    [{"params": backbone_params, "lr": 1.6e-5}, {"params": heads, "lr": 1.6e-4}], weight_decay=0.01
)
model.train()
for step in range(3):
    pixels = torch.randn(B2, 3, CROP, CROP, device=device)
    target = torch.rand(B2, CROP, CROP, device=device) * 9 + 0.5
    valid = torch.zeros(B2, CROP, CROP, device=device)
    valid[:, 16:-16, 16:-16] = 1.0
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        depth = model(pixel_values=pixels).predicted_depth
    loss = silog(depth, target, valid)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    print(f"fine-tune step {step} silog {loss.item():.4f}")
del depth, loss
report(f"phase2 three SILog fine-tuning steps at batch {B2} x {CROP}^2, bf16 autocast")

model.eval()
with torch.no_grad():
    for _ in range(2):
        pixels = torch.randn(B3, 3, H, W, device=device)
        depth = model(pixel_values=pixels).predicted_depth
        flipped = model(pixel_values=torch.flip(pixels, dims=[3])).predicted_depth
        depth = (depth + torch.flip(flipped, dims=[-1])) / 2
        print(f"flip-averaged depth {tuple(depth.shape)}")
        del depth, flipped
report(f"phase3 no_grad flip test-time augmentation at batch {B3} x {H}x{W}, fp32")
