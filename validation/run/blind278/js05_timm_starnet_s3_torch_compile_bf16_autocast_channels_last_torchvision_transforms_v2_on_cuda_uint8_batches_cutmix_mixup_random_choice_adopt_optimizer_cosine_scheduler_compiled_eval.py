"""StarNet-S3 (element-wise "star" multiplication of two 1x1-conv branches between depthwise convs;
`timm.create_model("starnet_s3", pretrained=False, drop_path_rate=0.1)`) trained under `torch.compile`
with a GPU data pipeline: CUDA uint8 batches through `torchvision.transforms.v2` (RandomResizedCrop to
192, RandomHorizontalFlip, ToDtype float32 scaled, Normalize) and `v2.RandomChoice([v2.CutMix, v2.MixUp])`
on the GPU (one-hot soft targets), channels-last, bf16 autocast, timm's ADOPT optimizer
(`create_optimizer_v2(opt="adoptw", lr=2e-3, weight_decay=0.05)`) and `timm.scheduler.CosineLRScheduler`
with warmup stepped per update. Phase 1: 6 compiled training steps at batch 128 from 256 x 256 uint8
images. Phase 2: the compiled model in eval mode under `torch.no_grad()` and bf16 autocast at batch 256 x
3 x 192 x 192 (a recompile for eval). Seeded. 2 phases."""

import timm
import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torchvision.transforms import v2

torch.manual_seed(2785)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("starnet_s3", pretrained=False, num_classes=1000, drop_path_rate=0.1)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="adoptw", lr=2e-3, weight_decay=0.05)
scheduler = CosineLRScheduler(
    optimizer, t_initial=6, lr_min=1e-5, warmup_t=2, warmup_lr_init=1e-5, t_in_epochs=False
)
cmodel = torch.compile(model)

augment = v2.Compose(
    [
        v2.RandomResizedCrop(192, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
mix = v2.RandomChoice([v2.CutMix(num_classes=1000, alpha=1.0), v2.MixUp(num_classes=1000, alpha=0.8)])

cmodel.train()
for step in range(6):
    raw = torch.randint(0, 256, (128, 3, 256, 256), dtype=torch.uint8, device=dev)
    labels = torch.randint(0, 1000, (128,), device=dev)
    x = augment(raw)
    x, soft = mix(x, labels)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = cmodel(x)
    loss = torch.sum(-soft * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step_update(num_updates=step + 1)
print("train", round(loss.item(), 3), round(optimizer.param_groups[0]["lr"], 6))
report("starnet_s3_compiled_v2_gpu_aug_cutmix_mixup_adopt_bf16")

del raw, labels, x, soft, logits, loss
cmodel.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.randn(256, 3, 192, 192, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (256,), device=dev)
        correct += (cmodel(x).argmax(-1) == y).sum().item()
print("top1", correct / 512)
report("starnet_s3_compiled_eval_no_grad_bf16_b256")
