"""torchvision's video ResNets from scratch (weights=None) as a Kinetics-400 training recipe writes
them: r3d_18 (400 classes) in fp32 with SGD (momentum 0.9, Nesterov, weight decay 1e-4) and a
MultiStepLR, batch 16 clips of 3 x 16 x 112 x 112 (normalised with the Kinetics mean/std; made from
uint8 (N, T, H, W, C) frames permuted to (N, C, T, H, W), so they and the r3d_18 activations keep
channels_last_3d strides), 2 steps (each its own phase); then the usual multi-clip test: 2 videos
of 10 clips each, the 20 clips run in chunks of 10 under inference_mode and the softmax averaged
per video; then the model and its optimizer deleted and mc3_18 (mixed convolutions) built with its
weights and the input in channels_last_3d, trained under bf16 autocast with AdamW (lr 3e-4, weight
decay 0.05) at batch 24 x 8 frames x 112 x 112 for 2 steps (mc3_18's build its own phase); 6
phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15901)
if SMALL:
    B, T, S, CLIPS, CHUNK, B2, T2 = 2, 4, 32, 4, 2, 2, 4
else:
    B, T, S, CLIPS, CHUNK, B2, T2 = 16, 16, 112, 10, 10, 24, 8
NUM_CLASSES = 400
device = "cuda" if torch.cuda.is_available() else "cpu"

MEAN = torch.tensor([0.43216, 0.394666, 0.37645], device=device).view(1, 3, 1, 1, 1)
STD = torch.tensor([0.22803, 0.22145, 0.216989], device=device).view(1, 3, 1, 1, 1)


def random_clips(n, frames, size):
    # uint8 frames as a decoder would hand them over: (N, T, H, W, C) -> (N, C, T, H, W) float
    raw = torch.randint(0, 256, (n, frames, size, size, 3), dtype=torch.uint8, device=device)
    clips = raw.permute(0, 4, 1, 2, 3).float().div_(255.0)
    return (clips - MEAN) / STD


model = torchvision.models.video.r3d_18(weights=None, num_classes=NUM_CLASSES).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, nesterov=True)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[20, 30], gamma=0.1)
criterion = torch.nn.CrossEntropyLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    video = random_clips(B, T, S)
    target = torch.randint(0, NUM_CLASSES, (B,), device=device)
    output = model(video)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"r3d step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del video, target, output, loss
model.eval()
video_probs = []
with torch.inference_mode():
    for _v in range(2):
        clips = random_clips(CLIPS, T, S)
        probs = []
        for chunk in clips.split(CHUNK):
            probs.append(F.softmax(model(chunk), dim=1))
        video_probs.append(torch.cat(probs).mean(dim=0))
    preds = torch.stack(video_probs).argmax(dim=1)
if device == "cuda":
    print(f"r3d 10-clip eval {preds.tolist()} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, scheduler, clips, probs, video_probs
model = torchvision.models.video.mc3_18(weights=None, num_classes=NUM_CLASSES)
model = model.to(device, memory_format=torch.channels_last_3d)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
if device == "cuda":
    print(f"mc3 model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for _ in range(2):
    video = random_clips(B2, T2, S).contiguous(memory_format=torch.channels_last_3d)
    target = torch.randint(0, NUM_CLASSES, (B2,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        output = model(video)
        loss = criterion(output, target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"mc3 loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
