"""torchvision MViT-v1-B video transformer (pooling attention over 8x56x56 tokens from 16-frame clips,
16 blocks) from random weights, trained on 400 classes under bf16 autocast with fused AdamW, label
smoothing and a warm-up then cosine schedule, batch 4 of 16x224x224 clips, 3 steps; then evaluated
under inference_mode on 2 videos of 3 clips each, the clip logits averaged; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.video import mvit_v1_b

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11104)
B, STEPS, NCLIPS = (1, 1, 2) if SMALL else (4, 3, 3)
T, S, NCLS = 16, 224, 400
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = mvit_v1_b(weights=None, num_classes=NCLS).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1.6e-3, weight_decay=0.05, fused=amp)
sched = torch.optim.lr_scheduler.SequentialLR(
    opt,
    [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=2),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(STEPS - 2, 1)),
    ],
    milestones=[2],
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    clips = torch.randn(B, 3, T, S, S, device=device)
    labels = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(clips)
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del clips, labels, logits, loss
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    videos = torch.randn(2, 3, T * NCLIPS, S, S, device=device)
    clips = videos.unflatten(2, (NCLIPS, T)).transpose(1, 2).flatten(0, 1)
    scores = model(clips).float().softmax(-1).view(2, NCLIPS, NCLS).mean(1)
    top = scores.topk(5).indices
if device == "cuda":
    print(
        f"eval {tuple(top.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
