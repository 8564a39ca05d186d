"""Multi-label image classification (40 tags, COCO/OpenImages style) with timm 1.0.29's `dpn68b` (Dual Path
Network, 11.8 M parameters) in channels_last, trained with timm's `AsymmetricLossMultiLabel(gamma_neg=4,
gamma_pos=0, clip=0.05)` (ASL, Ridnik et al. 2021). Batches of 48 uint8 images of 3 x 256 x 256 are
augmented on the GPU by torchvision.transforms.v2: `AutoAugment(AutoAugmentPolicy.IMAGENET)` on the uint8
batch (one sub-policy for the whole batch, drawn from the host generator), `RandomCrop(224)`,
`RandomHorizontalFlip`, `ToDtype(float32, scale=True)`, `Normalize` and `GaussianNoise(sigma=0.05)`.
Targets: multi-hot (each tag with probability 0.1). Phase 1: building the model and timm's `lambc` (LAMB
with trust-ratio clipping) by `create_optimizer_v2(model, "lambc", lr=4e-3, weight_decay=0.02)` and timm's
`TanhLRScheduler` (warmup 1, t_initial 10, stepped per step). Phase 2: 10 steps under bf16 autocast.
Phase 3: the model `.half()` in eval under `torch.inference_mode()`: 2 batches of 32 images of 256 x 256
in fp16, `v2.FiveCrop(224)` and each crop flipped (10 views), the sigmoids averaged, then the per-class
average precision by sorting the scores of the 64 images (`argsort`, `cumsum`) and its mean.
3 phases."""

import timm
import torch
from timm.loss import AsymmetricLossMultiLabel
from timm.optim import create_optimizer_v2
from timm.scheduler import TanhLRScheduler
from torchvision.transforms import v2

torch.manual_seed(2923)
dev = "cuda"
B, NUM_TAGS = 48, 40


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("dpn68b", pretrained=False, num_classes=NUM_TAGS)
model = model.to(dev, memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, "lambc", lr=4e-3, weight_decay=0.02)
scheduler = TanhLRScheduler(optimizer, t_initial=10, lr_min=1e-5, warmup_t=1, warmup_lr_init=1e-4)
criterion = AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=0, clip=0.05)
augment = v2.Compose(
    [
        v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET),
        v2.RandomCrop(224),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        v2.GaussianNoise(sigma=0.05),
    ]
)
print("params", sum(p.numel() for p in model.parameters()))
report("dpn68b_build_lambc_tanh")

model.train()
for step in range(10):
    raw = torch.randint(0, 256, (B, 3, 256, 256), dtype=torch.uint8, device=dev)
    targets = (torch.rand(B, NUM_TAGS, device=dev) < 0.1).float()
    images = augment(raw).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(images)
    loss = criterion(logits.float(), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step(step + 1)
print("train loss", round(loss.item(), 3))
report("dpn68b_train_autoaugment_asl_bf16_channels_last")

del raw, targets, images, logits, loss
model.half().eval()
mean = torch.tensor([0.485, 0.456, 0.406], device=dev, dtype=torch.half).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev, dtype=torch.half).view(1, 3, 1, 1)
scores, truth = [], []
with torch.inference_mode():
    for _rep in range(2):
        raw = torch.randint(0, 256, (32, 3, 256, 256), dtype=torch.uint8, device=dev)
        x = (raw.half() / 255 - mean) / std
        probs = 0
        for crop in v2.FiveCrop(224)(x):
            crop = crop.contiguous(memory_format=torch.channels_last)
            probs = probs + model(crop).float().sigmoid() + model(crop.flip(3)).float().sigmoid()
        scores.append(probs / 10)
        truth.append((torch.rand(32, NUM_TAGS, device=dev) < 0.1).float())
    scores, truth = torch.cat(scores), torch.cat(truth)
    order = scores.argsort(0, descending=True)
    hits = truth.gather(0, order)
    precision = hits.cumsum(0) / torch.arange(1, 65, device=dev).unsqueeze(1)
    ap = (precision * hits).sum(0) / hits.sum(0).clamp(min=1)
print("tta mAP", round(ap.mean().item(), 4))
report("dpn68b_half_five_crop_flip_tta_map")
