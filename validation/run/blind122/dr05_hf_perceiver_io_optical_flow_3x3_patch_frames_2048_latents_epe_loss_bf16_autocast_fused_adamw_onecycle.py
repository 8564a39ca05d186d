"""HF Perceiver IO for optical flow built from its config as deepmind/optical-flow-perceiver is (2048
latents of width 512, 24 self-attention layers of 16 heads, one cross-attention head, Fourier
position features of 64 bands, 3 x 3 patches of two 368 x 496 frames given as 27 channels each),
trained with an end-point-error loss written by hand (HF's forward does not train optical flow)
under bf16 autocast, fused AdamW with OneCycle and gradient clipping at 1.0; batch 1, 3 steps; then
flow inference under inference_mode and bf16 autocast for 2 frame pairs and the mean flow
magnitude; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import PerceiverConfig, PerceiverForOpticalFlow

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12205)
B, (H, W) = (1, (48, 64)) if SMALL else (1, (368, 496))
device = "cuda" if torch.cuda.is_available() else "cpu"

config = PerceiverConfig(
    num_latents=256 if SMALL else 2048,
    d_latents=512,
    d_model=322,
    num_blocks=1,
    num_self_attends_per_block=2 if SMALL else 24,
    num_self_attention_heads=16,
    num_cross_attention_heads=1,
    cross_attention_shape_for_attention="kv",
    self_attention_widening_factor=1,
    cross_attention_widening_factor=1,
    attention_probs_dropout_prob=0.0,
    train_size=[H, W],
)
model = PerceiverForOpticalFlow(config).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4, fused=device == "cuda")
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-4, total_steps=100, pct_start=0.05)


def frame_pairs(n):
    frames = torch.randn(n, 2, 3, H, W, device=device)
    patches = F.unfold(frames.flatten(0, 1), kernel_size=3, padding=1)
    return patches.view(n, 2, 27, H, W), torch.randn(n, H, W, 2, device=device) * 4


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    inputs, flow = frame_pairs(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        pred = model(inputs=inputs).logits
    epe = (pred.float() - flow).norm(dim=-1).mean()
    opt.zero_grad(set_to_none=True)
    epe.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} epe {epe.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del inputs, flow, pred, epe

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, _ = frame_pairs(2 * B)
    flow = model(inputs=inputs).logits
    magnitude = flow.float().norm(dim=-1).mean()
if device == "cuda":
    print(
        f"infer {tuple(flow.shape)} magnitude {magnitude.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
