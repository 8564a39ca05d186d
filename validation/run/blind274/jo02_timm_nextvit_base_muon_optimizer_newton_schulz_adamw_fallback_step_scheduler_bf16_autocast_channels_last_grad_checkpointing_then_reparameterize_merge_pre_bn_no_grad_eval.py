"""Training Next-ViT-Base from scratch with timm's Muon optimizer (`timm.create_model("nextvit_base",
pretrained=False, drop_path_rate=0.2)`: NCB conv blocks and NTB blocks with E-MHSA over
spatially-reduced keys/values), `timm.optim.create_optimizer_v2(model, opt="muon", lr=0.02,
weight_decay=0.05)`: momentum orthogonalized by 5 Newton-Schulz iterations in bf16 for the 2-D and
conv weights (flattened), an AdamW fallback for the 1-D parameters (norms, biases), a step
schedule with warmup from `timm.scheduler.create_scheduler_v2(sched="step")` stepped per update,
label-smoothed cross-entropy, bf16 autocast, channels-last, `model.set_grad_checkpointing(True)`.
Phase 1: 6 steps at batch 128 x 3 x 224 x 224. Phase 2: `timm.utils.reparameterize_model` merges
the pre-norm BatchNorms into the following linears (NextViT's `merge_pre_bn`) in a copy, and that
copy is evaluated under `torch.no_grad()` with bf16 autocast at batch 256, its logits compared with
the unfused model's on the first 32 images. Seeded. 2 phases."""

import timm
import torch
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import reparameterize_model

torch.manual_seed(2742)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("nextvit_base", pretrained=False, num_classes=1000, drop_path_rate=0.2)
model = model.to(dev).to(memory_format=torch.channels_last)
model.set_grad_checkpointing(True)
optimizer = create_optimizer_v2(model, opt="muon", lr=0.02, weight_decay=0.05)
scheduler, num_epochs = create_scheduler_v2(
    optimizer,
    sched="step",
    num_epochs=3,
    decay_epochs=1,
    decay_rate=0.5,
    warmup_epochs=1,
    warmup_lr=1e-4,
    updates_per_epoch=2,
)
criterion = LabelSmoothingCrossEntropy(smoothing=0.1)
print("muon params", sum(1 for g in optimizer.param_groups for p in g["params"] if p.ndim >= 2))

model.train()
num_updates = 0
for epoch in range(num_epochs):
    for _it in range(2):
        x = torch.randn(128, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (128,), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        num_updates += 1
        scheduler.step_update(num_updates=num_updates)
    scheduler.step(epoch + 1)
print("train", num_updates, round(loss.item(), 3), round(optimizer.param_groups[0]["lr"], 6))
report("nextvit_base_muon_bf16_channels_last_grad_ckpt")

del x, y, loss
model.eval()
deploy = reparameterize_model(model)  # a fused copy (inplace=False)
top1 = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for b in range(2):
        x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (256,), device=dev)
        logits = deploy(x)
        if b == 0:
            ref = model(x[:32])
            print("fused max diff", round((logits[:32].float() - ref.float()).abs().max().item(), 2))
        top1 += (logits.argmax(-1) == y).sum().item()
print("eval top1", top1 / 512)
report("nextvit_base_reparameterized_no_grad_bf16")
