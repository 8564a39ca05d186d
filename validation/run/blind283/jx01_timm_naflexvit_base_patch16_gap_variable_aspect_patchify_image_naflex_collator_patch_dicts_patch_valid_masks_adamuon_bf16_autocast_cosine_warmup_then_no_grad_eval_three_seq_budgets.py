"""NaFlex variable-resolution ViT training as timm 1.0.29 composes it, on `timm.create_model(
"naflexvit_base_patch16_gap", pretrained=False, num_classes=1000)` (ViT-B/16 with a linear patch embed
over pre-patchified inputs, learned 2-D position embeddings interpolated per grid size with antialiased
bicubic `F.interpolate`, masked average pooling). Each batch is 48 CPU images of four aspect ratios
(384x384, 256x576, 576x256, 320x448 pixels: 576, 576, 576 and 560 patches), cut by
`timm.data.naflex_transforms.patchify_image` and padded by `timm.data.naflex_dataset.NaFlexCollator(
max_seq_len=576)` into a dict of `patches` (48, 576, 768), `patch_coord` and `patch_valid`, copied to the
GPU with non_blocking from pinned memory; the model builds the boolean attention mask from patch_valid
(SDPA with a mask). Phase 1: 5 steps of bf16 autocast with `timm.optim.create_optimizer_v2(model,
opt="adamuon", lr=2e-3, weight_decay=0.05)` (AdaMuon: Newton-Schulz orthogonalized updates with a
second moment for 2-D weights, AdamW for the rest) and a cosine schedule with warmup from
`timm.scheduler.create_scheduler_v2`, gradient clipping at 1.0. Phase 2: no_grad bf16 evaluation at
three token budgets (max_seq_len 256, 576 and 1,024: images of 256x256, 384x384 and 512x512 pixels)
at batch 96. Seeded. 2 phases."""

import timm
import torch
from timm.data.naflex_dataset import NaFlexCollator
from timm.data.naflex_transforms import patchify_image
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2

torch.manual_seed(2831)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def make_batch(sizes, n, max_seq_len):
    items = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        img = torch.rand(3, h, w)
        patches, coord, valid = patchify_image(img, (16, 16))
        items.append(({"patches": patches, "patch_coord": coord, "patch_valid": valid}, i % 1000))
    inputs, targets = NaFlexCollator(max_seq_len=max_seq_len)(items)
    inputs = {k: v.pin_memory().to(dev, non_blocking=True) for k, v in inputs.items() if torch.is_tensor(v)}
    return inputs, targets.to(dev)


model = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, num_classes=1000).to(dev)
optimizer = create_optimizer_v2(model, opt="adamuon", lr=2e-3, weight_decay=0.05)
scheduler, _ = create_scheduler_v2(
    optimizer, sched="cosine", num_epochs=5, warmup_epochs=1, warmup_lr=1e-5, min_lr=1e-5, updates_per_epoch=1
)
criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
train_sizes = [(384, 384), (256, 576), (576, 256), (320, 448)]

model.train()
for step in range(5):
    inputs, targets = make_batch(train_sizes, 48, 576)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step(step + 1)
print("train", round(loss.item(), 3), round(optimizer.param_groups[0]["lr"], 6))
report("naflexvit_adamuon_bf16_train")

del inputs, targets, loss
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for side, budget in ((256, 256), (384, 576), (512, 1024)):
        inputs, targets = make_batch([(side, side)], 96, budget)
        logits = model(inputs)
        print("eval", budget, tuple(logits.shape), (logits.argmax(-1) == targets).sum().item())
        del inputs, targets, logits
report("naflexvit_no_grad_eval_three_budgets")
