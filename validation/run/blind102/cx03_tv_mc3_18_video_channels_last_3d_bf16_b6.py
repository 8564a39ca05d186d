"""torchvision MC3-18 (mixed 3-D / 2-D convolution ResNet for video) trained from scratch on clips of
12 frames at 112 x 144, channels_last_3d, bf16 autocast, AdamW with a OneCycle schedule, batch 6,
3 steps; then a no_grad evaluation of 10 clips with 3-crop test-time averaging; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10203)
B, T, H, W, STEPS, NCLS = (2, 4, 32, 40, 2, 7) if SMALL else (6, 12, 112, 144, 3, 51)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.video.mc3_18(num_classes=NCLS).to(device)
model = model.to(memory_format=torch.channels_last_3d)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    clip = torch.rand(B, 3, T, H, W, device=device).contiguous(memory_format=torch.channels_last_3d)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(clip), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del clip, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    full = torch.rand(B + 4, 3, T, H, W + W // 4, device=device)
    probs = 0
    for off in (0, W // 8, W // 4):
        crop = full[..., off : off + W].contiguous(memory_format=torch.channels_last_3d)
        probs = probs + model(crop).float().softmax(-1)
    pred = probs.argmax(-1)
if device == "cuda":
    print(
        f"eval {pred.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
