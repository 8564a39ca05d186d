"""Monocular metric depth with Apple's DepthPro as the Hugging Face DepthPro examples do, weights random: a
DepthProForDepthEstimation with its field-of-view model (`use_fov_model=True`) from a DepthProConfig of
DepthPro's shape (three DINOv2-L encoders, 1024 wide, 24 layers, patch 16 on 384 x 384: the patch encoder
over the 1536 x 1536 image cut into overlapping 384 patches at scales 1, 0.5 and 0.25 (25 + 9 + 1 patches),
the image encoder over the image at 384, the FoV encoder likewise; the fusion decoder and depth head).
The fine-tune freezes the three encoders and trains the fusion stage, depth head and FoV head with a
scale-invariant log loss by hand against random positive depth (and an L1 on the FoV).

Phases: 0 the model in fp32 and AdamW over the unfrozen parameters; 1 three head-only steps at batch 1 on
1536 x 1536 under bf16 autocast (the frozen encoders keep no graph); 2 the model `.half()`, `inference_mode`,
three single images at 1536 with DepthProImageProcessor.post_process_depth_estimation to 1536 x 2048 (depth
scaled by the focal length from the predicted FoV), the depth maps kept on the GPU; 3 one batch of 2 images
in fp16. Seeded; no sizes depend on values."""

import os

import torch
from transformers import DepthProConfig, DepthProForDepthEstimation, DepthProImageProcessor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3575)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    encoder = dict(
        model_type="dinov2", hidden_size=32, num_hidden_layers=12, num_attention_heads=2, patch_size=16
    )
    PATCH, B1, B3, TARGET = 64, 1, 2, (256, 320)
else:
    encoder = dict(
        model_type="dinov2", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, patch_size=16
    )
    PATCH, B1, B3, TARGET = 384, 1, 2, (1536, 2048)
SIZE = 4 * PATCH


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


config = DepthProConfig(
    patch_size=PATCH,
    use_fov_model=True,
    image_model_config=dict(encoder),
    patch_model_config=dict(encoder),
    fov_model_config=dict(encoder),
)
model = DepthProForDepthEstimation(config).to(device)
frozen = [
    model.depth_pro.encoder.patch_encoder,
    model.depth_pro.encoder.image_encoder,
    model.fov_model.fov_encoder,
]
for module in frozen:
    module.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=1e-4)
total = sum(p.numel() for p in model.parameters())
print(f"parameters {total:,}, trainable {sum(p.numel() for p in trainable):,}")
report("phase0 depth pro fp32 with fov, encoders frozen, adamw")


def silog(pred, target, lam=0.85):
    d = torch.log(pred.float().clamp(min=1e-3)) - torch.log(target)
    return torch.sqrt((d**2).mean() - lam * d.mean() ** 2)


model.train()
for step in range(3):
    pixels = torch.rand(B1, 3, SIZE, SIZE, device=device) * 2 - 1
    depth = torch.rand(B1, SIZE, SIZE, device=device) * 9 + 1
    fov = torch.rand(B1, device=device) * 30 + 40
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels)
    loss = silog(out.predicted_depth, depth) + 0.1 * (out.field_of_view.float() - fov).abs().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f} depth {tuple(out.predicted_depth.shape)}")
del out, loss
report(f"phase1 three head-only steps at batch {B1} x {SIZE}^2, bf16 autocast")

del opt
model.eval().half()
processor = DepthProImageProcessor()
kept = []
with torch.inference_mode():
    for _ in range(3):
        out = model(pixel_values=torch.rand(1, 3, SIZE, SIZE, device=device, dtype=torch.float16) * 2 - 1)
        result = processor.post_process_depth_estimation(out, target_sizes=[TARGET])[0]
        kept.append(result["predicted_depth"])
        print(f"depth {tuple(result['predicted_depth'].shape)} {result['predicted_depth'].dtype}")
        del out, result
report(f"phase2 fp16 inference_mode, 3 images at {SIZE} post-processed to {TARGET}")

del kept
with torch.inference_mode():
    out = model(pixel_values=torch.rand(B3, 3, SIZE, SIZE, device=device, dtype=torch.float16) * 2 - 1)
    print(f"batch depth {tuple(out.predicted_depth.shape)} fov {tuple(out.field_of_view.shape)}")
report(f"phase3 fp16 inference_mode, batch {B3} at {SIZE}")
