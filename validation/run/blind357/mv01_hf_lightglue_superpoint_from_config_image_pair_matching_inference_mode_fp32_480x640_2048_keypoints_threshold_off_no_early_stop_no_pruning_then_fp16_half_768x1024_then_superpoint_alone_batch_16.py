"""Matching image pairs with SuperPoint + LightGlue as the Hugging Face LightGlue examples do, with the
weights random: a LightGlueForKeypointMatching from `LightGlueConfig` (its SuperPoint keypoint detector
built from a SuperPointConfig inside it; LightGlue's 9 layers of 256-wide self- and cross-attention, eager).
To keep every shape fixed, SuperPoint keeps every pixel above a threshold of -1 (all of them) and then its
2,048 best after NMS and border removal (`max_keypoints=2048`), and LightGlue's early stopping and point
pruning are off (`depth_confidence=-1`, `width_confidence=-1`), so every layer sees all 2,048 points of
every image and `matches` / `matching_scores` are (2 x pairs, 2048).

Phases: 0 the model in fp32; 1 `inference_mode`, three batches of 4 image pairs at 480 x 640 (pixel_values
(4, 2, 3, 480, 640)), matches kept on the GPU; 2 the model `.half()`, two batches of 4 pairs at 768 x 1024 in
fp16; 3 SuperPoint alone (`model.keypoint_detector`, fp16) over 16 images at 480 x 640 in one batch, its
keypoints, scores, descriptors and mask kept. Seeded. Shapes hinge on values only in SuperPoint's
`nonzero(scores > threshold)`, which with the threshold at -1 is every pixel on the GPU."""

import os

import torch
from transformers import LightGlueConfig, LightGlueForKeypointMatching

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3571)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    H1, W1, H2, W2, PAIRS, KEYPOINTS, SINGLE = 64, 80, 96, 128, 2, 64, 3
else:
    H1, W1, H2, W2, PAIRS, KEYPOINTS, SINGLE = 480, 640, 768, 1024, 4, 2048, 16


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


config = LightGlueConfig(
    keypoint_detector_config=dict(model_type="superpoint", keypoint_threshold=-1.0, max_keypoints=KEYPOINTS),
    depth_confidence=-1.0,
    width_confidence=-1.0,
)
model = LightGlueForKeypointMatching(config).to(device).eval()
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 lightglue + superpoint fp32")

kept = []
with torch.inference_mode():
    for batch in range(3):
        pairs = torch.rand(PAIRS, 2, 3, H1, W1, device=device)
        out = model(pixel_values=pairs)
        kept.append((out.matches, out.matching_scores, out.keypoints))
        print(f"batch {batch} matches {tuple(out.matches.shape)} keypoints {tuple(out.keypoints.shape)}")
        del out
report(f"phase1 inference_mode fp32, 3 batches of {PAIRS} pairs at {H1}x{W1}")

del kept
model.half()
kept = []
with torch.inference_mode():
    for batch in range(2):
        pairs = torch.rand(PAIRS, 2, 3, H2, W2, device=device, dtype=torch.float16)
        out = model(pixel_values=pairs)
        kept.append((out.matches, out.matching_scores))
        print(f"fp16 batch {batch} matches {tuple(out.matches.shape)} scores {out.matching_scores.dtype}")
        del out
report(f"phase2 fp16 .half(), 2 batches of {PAIRS} pairs at {H2}x{W2}")

del kept
with torch.inference_mode():
    images = torch.rand(SINGLE, 3, H1, W1, device=device, dtype=torch.float16)
    det = model.keypoint_detector(images)
    print(f"superpoint keypoints {tuple(det.keypoints.shape)} descriptors {tuple(det.descriptors.shape)}")
report(f"phase3 superpoint alone fp16 over {SINGLE} images at {H1}x{W1}")
