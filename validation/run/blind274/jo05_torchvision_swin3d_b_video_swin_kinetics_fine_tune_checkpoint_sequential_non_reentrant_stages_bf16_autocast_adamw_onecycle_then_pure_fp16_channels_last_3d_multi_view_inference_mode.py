"""Fine-tuning the Video Swin Transformer Base from torchvision (`swin3d_b(weights=None,
num_classes=400)`: 3-D patch embedding (2, 4, 4) to 128 channels, shifted 3-D windows of 8 x 7 x 7,
depths 2/2/18/2), Kinetics-style: uint8 clips of 16 frames made on the GPU as `tv_tensors.Video`
(T, C, H, W), augmented there with `torchvision.transforms.v2` (RandomResizedCrop to 224,
RandomHorizontalFlip, ToDtype with scale, Normalize), stacked and permuted to (B, C, T, H, W).
The forward is written out as torchvision's, with `model.features` run through
`torch.utils.checkpoint.checkpoint_sequential(..., segments=4, use_reentrant=False)`; bf16 autocast,
AdamW (lr 1e-4, weight decay 0.05) under `OneCycleLR` stepped per iteration, gradient clipping at 1.0.
Phase 1: 5 steps at batch 8. Phase 2: the model cast to fp16 (`model.half()`), multi-view testing
under `torch.inference_mode()`: 2 temporal clips x 3 spatial crops (left/centre/right 224 crops of
a 256-high clip) of 16 frames for 4 videos, inputs in `torch.channels_last_3d`, the 6 views'
softmax averaged. Seeded. 2 phases."""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential
from torchvision import tv_tensors
from torchvision.models.video import swin3d_b
from torchvision.transforms import v2

torch.manual_seed(2745)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


MEAN, STD = [0.43216, 0.394666, 0.37645], [0.22803, 0.22145, 0.216989]
train_tf = v2.Compose(
    [
        v2.RandomResizedCrop((224, 224), scale=(0.3, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)


def forward(model, x):
    x = model.patch_embed(x)
    x = model.pos_drop(x)
    x = checkpoint_sequential(model.features, 4, x, use_reentrant=False)
    x = model.norm(x)
    x = x.permute(0, 4, 1, 2, 3)
    x = torch.flatten(model.avgpool(x), 1)
    return model.head(x)


model = swin3d_b(weights=None, num_classes=400).to(dev)
steps = 5
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-4, total_steps=steps, pct_start=0.4)

model.train()
for _step in range(steps):
    clips = []
    for _v in range(8):
        video = tv_tensors.Video(torch.randint(0, 256, (16, 3, 256, 340), dtype=torch.uint8, device=dev))
        clips.append(train_tf(video).permute(1, 0, 2, 3))  # (C, T, H, W)
    x = torch.stack(clips)
    y = torch.randint(0, 400, (8,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(forward(model, x), y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    sched.step()
print("train", round(loss.item(), 4), round(sched.get_last_lr()[0], 8))
report("swin3d_b_checkpoint_sequential_bf16_adamw")

del x, y, loss, clips, video
del optimizer, sched
model.eval().half()
norm_mean = torch.tensor(MEAN, device=dev, dtype=torch.float16).view(1, 3, 1, 1, 1)
norm_std = torch.tensor(STD, device=dev, dtype=torch.float16).view(1, 3, 1, 1, 1)
preds = []
with torch.inference_mode():
    for _v in range(4):
        video = torch.randint(0, 256, (3, 40, 256, 340), dtype=torch.uint8, device=dev)  # C, T, H, W
        views = []
        for t0 in (0, 24):
            for x0 in (0, 58, 116):
                views.append(video[:, t0 : t0 + 16, 16:240, x0 : x0 + 224])
        x = torch.stack(views).half().div_(255).sub_(norm_mean).div_(norm_std)
        x = x.contiguous(memory_format=torch.channels_last_3d)
        preds.append(model(x).float().softmax(-1).mean(0))
print("views", tuple(x.shape), "pred", torch.stack(preds).argmax(-1).tolist())
report("swin3d_b_fp16_channels_last_3d_multi_view_inference_mode")
