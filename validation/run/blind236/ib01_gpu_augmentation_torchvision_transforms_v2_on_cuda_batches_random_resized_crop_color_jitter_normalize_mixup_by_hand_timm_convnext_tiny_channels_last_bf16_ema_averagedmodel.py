"""Augmentation on the GPU: uint8 image batches moved to the GPU and transformed there with
torchvision.transforms.v2 (RandomResizedCrop to 224, RandomHorizontalFlip, ColorJitter, ToDtype float
with scaling, Normalize) applied to the whole batch, then Mixup written by hand (a Beta-drawn lambda, a
rolled batch, soft targets) feeding a timm ConvNeXt-Tiny (weights=None) in channels_last under bf16
autocast with fused AdamW and an EMA through `torch.optim.swa_utils.AveragedModel` with
`get_ema_multi_avg_fn(0.999)`; then the EMA model evaluated under inference_mode on center crops.

Phases: model, EMA and optimizer built; 4 training steps at batch 96 from 256 x 256 uint8 images; EMA eval
at batch 256. No value-dependent sizes (the crop box is drawn on the host, one per batch). 3 phases."""

import timm
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.transforms import v2

torch.manual_seed(2361)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = (
    timm.create_model("convnext_tiny", pretrained=False, num_classes=100)
    .cuda()
    .to(memory_format=torch.channels_last)
)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
train_tf = v2.Compose(
    [
        v2.RandomResizedCrop(224, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(0.4, 0.4, 0.4),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]
)
eval_tf = v2.Compose(
    [
        v2.CenterCrop(224),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]
)
report("model ema optimizer")

for step in range(4):
    images = torch.randint(0, 256, (96, 3, 256, 256), dtype=torch.uint8).cuda(non_blocking=True)
    labels = torch.randint(0, 100, (96,), device="cuda")
    x = train_tf(images).contiguous(memory_format=torch.channels_last)
    lam = float(torch.distributions.Beta(0.8, 0.8).sample())
    x = lam * x + (1 - lam) * x.roll(1, 0)
    target = lam * F.one_hot(labels, 100).float() + (1 - lam) * F.one_hot(labels.roll(1, 0), 100).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.sum(-target * F.log_softmax(model(x).float(), -1), -1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    print("step", step, round(loss.item(), 4))
del loss, x, images
report("train gpu augmentation mixup bf16")

ema.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    images = torch.randint(0, 256, (256, 3, 256, 256), dtype=torch.uint8, device="cuda")
    logits = ema(eval_tf(images).contiguous(memory_format=torch.channels_last))
    print("ema eval", tuple(logits.shape))
del logits, images
report("ema eval inference_mode")
