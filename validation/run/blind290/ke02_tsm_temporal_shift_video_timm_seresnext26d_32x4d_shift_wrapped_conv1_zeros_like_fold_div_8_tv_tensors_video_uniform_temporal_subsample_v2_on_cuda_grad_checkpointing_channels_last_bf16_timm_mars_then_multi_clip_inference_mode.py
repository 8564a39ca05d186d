"""Temporal Shift Module (Lin et al. 2019) video classification, as the TSM reference code builds it, on timm
1.0.29's `seresnext26d_32x4d` (174 classes, Something-Something-like, drop_path 0.1). Every bottleneck's
`conv1` is wrapped by a `TemporalShift` module that views the (N*T, C, H, W) activations as (N, T, C, H, W),
shifts 1/8 of the channels one frame back and 1/8 one frame forward into a `torch.zeros_like` buffer (the
reference's non-inplace shift) and runs the wrapped conv; the logits of the T frames are averaged (segment
consensus). Clips are `tv_tensors.Video` uint8 tensors of 16 x 3 x 256 x 320 made on the GPU (as a GPU video
decoder hands them over) and augmented there per sample by `torchvision.transforms.v2`:
`UniformTemporalSubsample(8)`, `RandomResizedCrop(224, scale=(0.3, 1.0))`, `RandomHorizontalFlip()`,
`ToDtype(torch.float32, scale=True)` and `Normalize` (ImageNet statistics). The network runs channels-last
with `set_grad_checkpointing(True)` (timm's `checkpoint_seq` over each stage's blocks). Phase 1: building
the model and timm's `Mars` optimizer (`create_optimizer_v2(model, "mars", lr=3e-3, weight_decay=0.05)`, no
decay on biases and norms) with `TanhLRScheduler` (warmup 2). Phase 2: 6 steps of bf16 autocast at 12 clips
(96 frames), label smoothing 0.1, gradients clipped at 20. Phase 3: `model.eval()` under
`torch.inference_mode()` and bf16 autocast: 3 clips of 8 frames (uniform subsample of 48 decoded frames,
resized to 256 on the short side, centre-cropped to 224) of 8 videos, the clip scores averaged.
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import TanhLRScheduler
from torch import nn
from torchvision import tv_tensors
from torchvision.transforms import v2

torch.manual_seed(2902)
dev = "cuda"
T, CLIPS, NUM_CLASSES = 8, 12, 174


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class TemporalShift(nn.Module):
    def __init__(self, net, n_segment, fold_div=8):
        super().__init__()
        self.net = net
        self.n_segment = n_segment
        self.fold_div = fold_div

    def forward(self, x):
        nt, c, h, w = x.size()
        x = x.view(nt // self.n_segment, self.n_segment, c, h, w)
        fold = c // self.fold_div
        out = torch.zeros_like(x)
        out[:, :-1, :fold] = x[:, 1:, :fold]
        out[:, 1:, fold : 2 * fold] = x[:, :-1, fold : 2 * fold]
        out[:, :, 2 * fold :] = x[:, :, 2 * fold :]
        return self.net(out.view(nt, c, h, w))


model = timm.create_model("seresnext26d_32x4d", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1)
for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
    for block in stage:
        block.conv1 = TemporalShift(block.conv1, T)
model = model.to(dev, memory_format=torch.channels_last)
model.set_grad_checkpointing(True)
optimizer = create_optimizer_v2(model, "mars", lr=3e-3, weight_decay=0.05)
scheduler = TanhLRScheduler(optimizer, t_initial=6, warmup_t=2, warmup_lr_init=1e-4)
report("tsm_seresnext26d_build_mars")

train_tf = v2.Compose(
    [
        v2.UniformTemporalSubsample(T),
        v2.RandomResizedCrop(224, scale=(0.3, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
eval_tf = v2.Compose(
    [
        v2.Resize(256, antialias=True),
        v2.CenterCrop(224),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)


def decoded_clip(frames):
    return tv_tensors.Video(torch.randint(0, 256, (frames, 3, 256, 320), dtype=torch.uint8, device=dev))


model.train()
for step in range(6):
    clips = torch.stack([train_tf(decoded_clip(16)) for _ in range(CLIPS)])
    target = torch.randint(0, NUM_CLASSES, (CLIPS,), device=dev)
    x = clips.flatten(0, 1).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x).view(CLIPS, T, -1).mean(1)
        loss = F.cross_entropy(logits, target, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 20.0)
    optimizer.step()
    scheduler.step(step + 1)
print("train loss", round(loss.item(), 3))
report("tsm_train_bf16_grad_checkpointing_mars")

del clips, x, logits, loss
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _video in range(8):
        video = decoded_clip(48)
        idx = torch.linspace(0, 47, 3 * T, device=dev).long().view(T, 3).t()
        views = torch.stack([eval_tf(tv_tensors.Video(video[i])) for i in idx])
        x = views.flatten(0, 1).contiguous(memory_format=torch.channels_last)
        scores = model(x).float().softmax(-1).view(3, T, -1).mean((0, 1))
        correct += int(scores.argmax() == 0)
print("eval", correct)
report("tsm_eval_multi_clip_inference_mode")
