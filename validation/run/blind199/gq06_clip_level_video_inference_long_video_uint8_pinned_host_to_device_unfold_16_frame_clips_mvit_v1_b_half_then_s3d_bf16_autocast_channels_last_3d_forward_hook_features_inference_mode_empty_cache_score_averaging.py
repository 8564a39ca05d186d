"""Clip-level inference over a long video with torchvision's video models (constructors, no weights).

A decoded 10-second video is held on the host as uint8 frames (2 videos x 288 frames x 224 x 224 x 3, THWC
as decoders return them) in pinned memory, copied to the device with non_blocking=True, converted to
float, normalised with the Kinetics mean/std and permuted to (C, T, H, W). Clips of 16 frames at a temporal
stride of 8 are cut with Tensor.unfold on the time axis (35 clips per video) and scored in batches.

1. mvit_v1_b(num_classes=400) converted with .half(), eval, under torch.inference_mode; 8 clips per forward
   in fp16; per-clip softmax averaged into a video-level score, top-5 printed.
2. The MViT deleted and torch.cuda.empty_cache(); s3d(num_classes=400) in torch.channels_last_3d under
   torch.inference_mode and bf16 autocast, 16 clips per forward, with a forward hook on model.features
   collecting the pooled 1,024-d clip embeddings (mean over T, H, W) for retrieval; cosine similarity
   matrix of all 70 clip embeddings.
3. A last pass of s3d over both videos' clips in fp32 (autocast off) at 35 clips per forward under no_grad,
   the clip logits concatenated and averaged.

Phases: video load and clip cutting; MViT fp16 scoring; S3D bf16 features and similarity; S3D fp32 pass.
4 phases."""

import gc
import os

import torch
import torch.nn.functional as F
from torchvision.models.video import mvit_v1_b, s3d

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19906)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    N_VIDEOS, N_FRAMES, MVIT_B, S3D_B, FP32_B = 1, 32, 2, 2, 3
else:
    N_VIDEOS, N_FRAMES, MVIT_B, S3D_B, FP32_B = 2, 288, 8, 16, 35
CLIP, STRIDE, SIZE, N_CLASSES = 16, 8, 224, 400


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB, "
            f"reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB"
        )
        torch.cuda.reset_peak_memory_stats()


frames = torch.randint(0, 256, (N_VIDEOS, N_FRAMES, SIZE, SIZE, 3), dtype=torch.uint8)
if device == "cuda":
    frames = frames.pin_memory()
mean = torch.tensor([0.43216, 0.394666, 0.37645], device=device).view(1, 3, 1, 1, 1)
std = torch.tensor([0.22803, 0.22145, 0.216989], device=device).view(1, 3, 1, 1, 1)
video = frames.to(device, non_blocking=True)
video = video.permute(0, 4, 1, 2, 3).float().div_(255.0)  # (V, C, T, H, W)
video = (video - mean) / std
clips = video.unfold(2, CLIP, STRIDE)  # (V, C, n_clips, H, W, CLIP)
clips = clips.permute(0, 2, 1, 5, 3, 4).reshape(-1, 3, CLIP, SIZE, SIZE).contiguous()
n_clips = clips.shape[0] // N_VIDEOS
del video
print(f"{N_VIDEOS} videos, {n_clips} clips each, clip tensor {tuple(clips.shape)}")
report("load")

mvit = mvit_v1_b(num_classes=N_CLASSES).to(device).eval()
if amp:
    mvit = mvit.half()
with torch.inference_mode():
    logits = []
    for start in range(0, clips.shape[0], MVIT_B):
        batch = clips[start : start + MVIT_B]
        logits.append(mvit(batch.half() if amp else batch).float())
    probs = torch.cat(logits).softmax(-1).view(N_VIDEOS, n_clips, N_CLASSES).mean(1)
    top5 = probs.topk(5).indices.cpu()
print(f"mvit top-5 video 0 {top5[0].tolist()}")
report("mvit fp16")

del mvit, logits, probs
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()

model = s3d(num_classes=N_CLASSES).to(device, memory_format=torch.channels_last_3d).eval()
embeddings = []
hook = model.features.register_forward_hook(
    lambda mod, inp, out: embeddings.append(out.float().mean(dim=(2, 3, 4)))
)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for start in range(0, clips.shape[0], S3D_B):
        batch = clips[start : start + S3D_B].contiguous(memory_format=torch.channels_last_3d)
        model(batch)
    emb = F.normalize(torch.cat(embeddings), dim=-1)
    sim = emb @ emb.T
off_diag = (sim.sum() - sim.diag().sum()).item() / (sim.numel() - sim.shape[0])
print(f"s3d embeddings {tuple(emb.shape)}, mean off-diagonal similarity {off_diag:.4f}")
hook.remove()
embeddings.clear()
del emb, sim
report("s3d bf16 features")

with torch.no_grad():
    out = []
    for start in range(0, clips.shape[0], FP32_B):
        out.append(model(clips[start : start + FP32_B]))
    video_logits = torch.cat(out).view(N_VIDEOS, n_clips, N_CLASSES).mean(1)
print(f"s3d fp32 video predictions {video_logits.argmax(-1).tolist()}")
if device == "cuda":
    print(f"s3d fp32: max {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
