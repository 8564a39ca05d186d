"""Multi-label image tagging (COCO-style, 80 labels) with an anti-aliased ResNet, as ASL-paper training
recipes do it. Model: timm 1.0.29's `resnetblur50d` (BlurPool2d on the strided convolutions, deep stem,
avg-down) with `drop_block_rate=0.1`, `drop_path_rate=0.05` and `global_pool="catavgmax"` (avg and max
pooled features concatenated, 4096 into the classifier), channels-last. Loss: timm's
`AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=0, clip=0.05)` on random multi-hot targets (5% positives).
Phase 1: the model, `torch.optim.NAdam(decoupled_weight_decay=True, momentum_decay=4e-3)` and `CyclicLR`
(triangular2, `cycle_momentum=False`) stepped per batch, `torch.amp.GradScaler`.
Phase 2: 3 steps at 64 x 256 x 256 under fp16 autocast.
Phase 3: `model.eval()` at the higher test resolution 320 under `torch.inference_mode()` + fp16 autocast, 2
batches of 96, the sigmoid scores gathered and a per-class average precision computed on the GPU (scores
sorted per class, cumulative true positives).
Phase 4: `model.set_grad_checkpointing(True)`, `model.train()`, 2 more steps at 128 x 256 x 256.
4 phases."""

import timm
import torch
from timm.loss import AsymmetricLossMultiLabel

torch.manual_seed(30803)
dev = "cuda"
NUM_LABELS = 80


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model(
    "resnetblur50d", num_classes=NUM_LABELS, drop_block_rate=0.1, drop_path_rate=0.05, global_pool="catavgmax"
)
model = model.to(dev).to(memory_format=torch.channels_last)
print("head in", model.get_classifier().in_features)
criterion = AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=0, clip=0.05)
optimizer = torch.optim.NAdam(
    model.parameters(), lr=2e-4, weight_decay=1e-4, momentum_decay=4e-3, decoupled_weight_decay=True
)
scheduler = torch.optim.lr_scheduler.CyclicLR(
    optimizer, base_lr=1e-5, max_lr=2e-4, step_size_up=50, mode="triangular2", cycle_momentum=False
)
scaler = torch.amp.GradScaler("cuda")
report("phase1 build")


def train_step(batch):
    x = torch.randn(batch, 3, 256, 256, device=dev).contiguous(memory_format=torch.channels_last)
    y = (torch.rand(batch, NUM_LABELS, device=dev) < 0.05).float()
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = criterion(logits.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.detach()


model.train()
for step in range(3):
    loss = train_step(64)
    print(f"step {step} loss {loss.item():.3f}")
del loss
report("phase2 train 256")

model.eval()
scores, targets = [], []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _ in range(2):
        x = torch.randn(96, 3, 320, 320, device=dev).contiguous(memory_format=torch.channels_last)
        scores.append(model(x).float().sigmoid())
        targets.append((torch.rand(96, NUM_LABELS, device=dev) < 0.05).float())
    scores, targets = torch.cat(scores), torch.cat(targets)
    order = scores.argsort(dim=0, descending=True)
    hits = targets.gather(0, order)
    tp = hits.cumsum(0)
    precision = tp / torch.arange(1, hits.shape[0] + 1, device=dev)[:, None]
    ap = (precision * hits).sum(0) / hits.sum(0).clamp(min=1)
    print("mAP", float(ap.mean()))
del x, scores, targets, order, hits, tp, precision, ap
report("phase3 eval 320")

model.set_grad_checkpointing(True)
model.train()
for step in range(2):
    loss = train_step(128)
    print(f"ckpt step {step} loss {loss.item():.3f}")
report("phase4 checkpointed train")
