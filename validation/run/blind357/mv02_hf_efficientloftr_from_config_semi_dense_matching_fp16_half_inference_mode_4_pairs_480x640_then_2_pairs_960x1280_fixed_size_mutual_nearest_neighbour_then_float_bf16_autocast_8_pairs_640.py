"""Dense (detector-free) image matching with EfficientLoFTR as the Hugging Face examples do, weights random:
an EfficientLoFTRForKeypointMatching from `EfficientLoFTRConfig()` (its RepVGG backbone of 1 / 2 / 4 / 14
blocks down to 1/8 resolution, 4 layers of aggregated self- and cross-attention at 256 wide with RoPE, the
dual-softmax coarse matcher and the fine refinement at 1/2 resolution). Its outputs have a fixed size:
one coarse match (or -1) per 1/8-resolution cell of each image, (pairs, 2, H/8 x W/8), with the mutual
nearest neighbour test written as masks, not as `nonzero`.

Phases: 0 the model, `.half()`; 1 `inference_mode`, three batches of 4 pairs at 480 x 640 in fp16, the
matches, scores and keypoints kept; 2 two batches of 2 pairs at 960 x 1280 in fp16 (120 x 160 = 19,200
coarse cells a side: a 19,200 x 19,200 similarity per pair); 3 the model back to fp32 (`.float()`) and
under bf16 autocast one batch of 8 pairs at 640 x 640. Seeded; no sizes depend on values."""

import os

import torch
from transformers import EfficientLoFTRConfig, EfficientLoFTRForKeypointMatching

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3572)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    H1, W1, P1, H2, W2, P2, S3, P3 = 64, 96, 2, 96, 128, 1, 64, 2
else:
    H1, W1, P1, H2, W2, P2, S3, P3 = 480, 640, 4, 960, 1280, 2, 640, 8


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


model = EfficientLoFTRForKeypointMatching(EfficientLoFTRConfig()).to(device).eval().half()
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 efficientloftr fp16")

kept = []
with torch.inference_mode():
    for batch in range(3):
        pairs = torch.rand(P1, 2, 3, H1, W1, device=device, dtype=torch.float16)
        out = model(pixel_values=pairs)
        kept.append((out.matches, out.matching_scores, out.keypoints))
        print(f"batch {batch} matches {tuple(out.matches.shape)} keypoints {tuple(out.keypoints.shape)}")
        del out
report(f"phase1 inference_mode fp16, 3 batches of {P1} pairs at {H1}x{W1}")

del kept
kept = []
with torch.inference_mode():
    for batch in range(2):
        pairs = torch.rand(P2, 2, 3, H2, W2, device=device, dtype=torch.float16)
        out = model(pixel_values=pairs)
        kept.append((out.matches, out.matching_scores, out.keypoints))
        print(f"large batch {batch} matches {tuple(out.matches.shape)}")
        del out
report(f"phase2 inference_mode fp16, 2 batches of {P2} pairs at {H2}x{W2}")

del kept
model.float()
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    pairs = torch.rand(P3, 2, 3, S3, S3, device=device)
    out = model(pixel_values=pairs)
    print(f"bf16 autocast matches {tuple(out.matches.shape)} scores {out.matching_scores.dtype}")
report(f"phase3 fp32 weights, bf16 autocast, {P3} pairs at {S3}x{S3}")
