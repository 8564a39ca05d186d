"""torchvision ConvNeXt-Small (stochastic depth 0.4, layer scale) trained from scratch on 1,000
classes in channels_last under bf16 autocast: gradient accumulation over 2 micro-batches of 32
images at 224 x 224, cross entropy with label smoothing 0.1, gradient clipping, AdamW with a
linear warm-up (LinearLR) then cosine (SequentialLR), 3 optimizer steps; then eval under
inference_mode with horizontal-flip test-time augmentation (the two views' softmax averaged) on 64
images; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10305)
B, BE, R, NCLS = (2, 4, 64, 10) if SMALL else (32, 64, 224, 1000)
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.convnext_small(num_classes=NCLS, stochastic_depth_prob=0.4)
model = model.to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)
warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
cos = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cos], milestones=[2])
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    for _micro in range(ACCUM):
        x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, NCLS, (B,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    xe = torch.randn(BE, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    probs = (model(xe).float().softmax(-1) + model(xe.flip(-1)).float().softmax(-1)) / 2
    pred = probs.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
