"""Two timm families no earlier script touched. A hybrid ResNet-ViT (`vit_small_r26_s32_224`: a
ResNetV2-26 stem/backbone with StdConv + GroupNorm feeding 1/32 patches to a ViT-S), built with
`dynamic_img_size=True`, fine-tuned at 224 px with `set_grad_checkpointing()`, bf16 autocast, AdamW with
layer-wise LR decay (`create_optimizer_v2(..., layer_decay=0.75)`), 2-step gradient accumulation and
a warmup-cosine `timm.scheduler.CosineLRScheduler` stepped per update; then in eval at 288 px
`forward_intermediates(indices=3, output_fmt="NCHW")` collects the last three blocks' feature maps,
which are pooled and concatenated for a ridge-regression probe solved with `torch.linalg.solve` on the
GPU. Then an `inception_resnet_v2` (299 px, fp16 with `.half()`) does ten-crop test-time augmentation:
each 342 px image is cut into the four corners and centre plus their flips
(`torchvision.transforms.v2.functional.ten_crop` on CUDA tensors) and the 10 softmaxes averaged.

Phases: 0 data; 1 hybrid ViT fine-tuning; 2 intermediates + ridge probe at 288; 3 Inception-ResNet-v2
ten-crop TTA; 4 metrics."""

import os

import timm
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3314)
device = "cuda" if torch.cuda.is_available() else "cpu"
N_CLASSES, ACCUM = 20, 2
if SMALL:
    BS, UPDATES, N_PROBE, N_TEST, TTA_BS = 4, 1, 8, 4, 2
else:
    BS, UPDATES, N_PROBE, N_TEST, TTA_BS = 48, 3, 96, 32, 8


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


train_x = torch.randn(BS * ACCUM * UPDATES, 3, 224, 224)
train_y = torch.randint(0, N_CLASSES, (BS * ACCUM * UPDATES,))
probe_x = torch.randn(N_PROBE, 3, 288, 288)
probe_y = torch.randint(0, N_CLASSES, (N_PROBE,))
test_x = torch.randn(N_TEST, 3, 342, 342)
report("data")

vit = timm.create_model(
    "vit_small_r26_s32_224", pretrained=False, num_classes=N_CLASSES, dynamic_img_size=True, drop_path_rate=0.1
).to(device)
vit.set_grad_checkpointing()
optimizer = create_optimizer_v2(vit, opt="adamw", lr=5e-4, weight_decay=0.05, layer_decay=0.75)
sched = CosineLRScheduler(optimizer, t_initial=UPDATES, warmup_t=1, warmup_lr_init=1e-6, t_in_epochs=False)
vit.train()
for upd in range(UPDATES):
    for micro in range(ACCUM):
        i = (upd * ACCUM + micro) * BS
        x, y = train_x[i : i + BS].to(device), train_y[i : i + BS].to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = F.cross_entropy(vit(x), y, label_smoothing=0.1) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(vit.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sched.step_update(upd + 1)
del optimizer
report("vit_finetune")

vit.eval()
feats = []
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for s in range(0, N_PROBE, BS):
        inter = vit.forward_intermediates(
            probe_x[s : s + BS].to(device), indices=3, output_fmt="NCHW", intermediates_only=True
        )
        feats.append(torch.cat([t.float().mean((2, 3)) for t in inter], dim=1))
feats = torch.cat(feats)
targets = F.one_hot(probe_y.to(device), N_CLASSES).float()
gram = feats.T @ feats + 1.0 * torch.eye(feats.shape[1], device=device)
w_probe = torch.linalg.solve(gram, feats.T @ targets)
probe_acc = ((feats @ w_probe).argmax(-1) == probe_y.to(device)).float().mean()
del vit
report("intermediates_probe")

irv2 = timm.create_model("inception_resnet_v2", pretrained=False, num_classes=N_CLASSES).half().to(device).eval()
tta = []
with torch.inference_mode():
    for s in range(0, N_TEST, TTA_BS):
        x = test_x[s : s + TTA_BS].to(device).half()
        crops = torch.stack(TF.ten_crop(x, [299, 299]), dim=1)
        logits = irv2(crops.flatten(0, 1)).float().view(x.shape[0], 10, N_CLASSES)
        tta.append(logits.softmax(-1).mean(1))
tta = torch.cat(tta)
report("ten_crop_tta")

conf = tta.max(-1).values
print(f"loss {loss.item() * ACCUM:.3f} probe acc {probe_acc.item():.3f} tta conf {conf.mean().item():.4f}")
report("metrics")
