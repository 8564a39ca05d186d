"""Monocular depth estimation with HF GLPN (a Mix Transformer encoder with depths 2, 2, 2, 2 and a
selective-feature-fusion decoder), built from a config: two fp32 training steps at batch 8 on
480x640 images whose depth targets are prepared on the host as a LiDAR-like sparse map (about a
third of the pixels valid, zeros elsewhere) and scored by GLPN's own SiLog loss over the valid
pixels, AdamW; then inference of 12 images under bf16 autocast and torch.inference_mode with a
horizontal-flip test-time average; 3 phases."""

import os

import torch
from transformers import GLPNConfig, GLPNForDepthEstimation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10002)
if SMALL:
    cfg = GLPNConfig(hidden_sizes=[16, 32, 80, 64], decoder_hidden_size=16)
    B, H, W, EVAL = 2, 64, 96, 2
else:
    cfg = GLPNConfig()
    B, H, W, EVAL = 8, 480, 640, 12
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GLPNForDepthEstimation(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2)
gen = torch.Generator().manual_seed(7)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def sparse_depth():
    depth = torch.rand(B, H, W, generator=gen) * 9.0 + 1.0
    rows = torch.rand(B, H, 1, generator=gen) < 0.5
    cols = torch.rand(B, 1, W, generator=gen) < 0.6
    keep = rows & cols
    keep[:, : H // 3] = False
    return depth * keep


for step in range(2):
    images = torch.rand(B, 3, H, W, device=device)
    target = sparse_depth().to(device)
    out = model(pixel_values=images, labels=target)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} valid {(target > 0).float().mean().item():.3f} loss {out.loss.item():.3f}")
    if device == "cuda":
        print(
            f"train {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, target, out

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    images = torch.rand(EVAL, 3, H, W, device=device)
    depth = model(pixel_values=images).predicted_depth
    flipped = model(pixel_values=images.flip(-1)).predicted_depth.flip(-1)
    depth = (depth.float() + flipped.float()) / 2
    print(f"depth {tuple(depth.shape)} mean {depth.mean().item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
