"""Cityscapes-style semantic segmentation with torchvision's deeplabv3_resnet101 (constructor, no weights).

The model is deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=19, aux_loss=True): a
dilated ResNet-101 (output stride 8), the ASPP head and the FCN auxiliary head on layer3.
torch.backends.cudnn.benchmark is True for training (fixed crops) and set False before the evaluation, whose
input sizes vary with the scale.

1. Set-up: the model in torch.channels_last, SGD (momentum 0.9, wd 1e-4, the heads at 10x lr) with a
   polynomial lr (LambdaLR, power 0.9).
2. First training step: batch 4 of 512 x 512 crops in channels_last under bf16 autocast, cross-entropy with
   ignore_index 255 on both outputs (aux weight 0.4), at the outputs' (input) size.
3. Two more steps at the same size.
4. Evaluation under torch.inference_mode, fp32 (no autocast): one 512 x 1024 image at scales 0.75, 1.0
   and 1.25 with horizontal-flip test-time augmentation, logits resized back with F.interpolate and their
   softmax summed into an accumulator; confusion matrix by bincount against random labels.
5. The same evaluation under bf16 autocast at batch 2.

Phases: set-up; first step; steps 2-3; fp32 multi-scale flip TTA; bf16 TTA at batch 2. 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_resnet101

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(33801)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
torch.backends.cudnn.benchmark = True
if SMALL:
    B, CROP, EVAL_HW = 2, 64, (64, 128)
else:
    B, CROP, EVAL_HW = 4, 512, (512, 1024)
N_CLASSES = 19
SCALES = (0.75, 1.0, 1.25)
ITERS = 1000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=N_CLASSES, aux_loss=True)
model = model.to(device, memory_format=torch.channels_last)
params = [
    {"params": [p for p in model.backbone.parameters() if p.requires_grad]},
    {"params": [p for p in model.classifier.parameters() if p.requires_grad], "lr": 0.1},
    {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.1},
]
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 - it / ITERS) ** 0.9)
report("setup")


def train_step():
    model.train()
    images = torch.randn(B, 3, CROP, CROP, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, N_CLASSES, (B, CROP, CROP), device=device)
    labels[:, : CROP // 16] = 255
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        out = model(images)
        loss = F.cross_entropy(out["out"], labels, ignore_index=255)
        loss = loss + 0.4 * F.cross_entropy(out["aux"], labels, ignore_index=255)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    return loss.detach()


loss = train_step()
print(f"step 0 loss {loss.item():.4f}")
report("first step")
for _ in range(2):
    loss = train_step()
print(f"step 2 loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.5f}")
report("steps 2-3")


def tta(images, bf16):
    h, w = images.shape[-2:]
    probs = torch.zeros(images.shape[0], N_CLASSES, h, w, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16 and amp):
        for s in SCALES:
            x = F.interpolate(images, scale_factor=s, mode="bilinear", align_corners=False)
            x = x.contiguous(memory_format=torch.channels_last)
            for flip in (False, True):
                xi = torch.flip(x, dims=[3]) if flip else x
                logits = model(xi)["out"]
                if flip:
                    logits = torch.flip(logits, dims=[3])
                logits = F.interpolate(logits, size=(h, w), mode="bilinear", align_corners=False)
                probs += logits.float().softmax(1)
    return probs


def confusion(pred, target):
    k = target * N_CLASSES + pred
    return torch.bincount(k.flatten(), minlength=N_CLASSES * N_CLASSES).reshape(N_CLASSES, N_CLASSES)


torch.backends.cudnn.benchmark = False  # the TTA's sizes vary: no search per new shape
model.eval()
with torch.inference_mode():
    images = torch.randn(1, 3, *EVAL_HW, device=device)
    target = torch.randint(0, N_CLASSES, (1, *EVAL_HW), device=device)
    cm = confusion(tta(images, bf16=False).argmax(1), target)
print(f"fp32 TTA correct pixels {cm.diag().sum().item()} of {cm.sum().item()}")
report("fp32 multi-scale flip TTA")

with torch.inference_mode():
    images = torch.randn(2, 3, *EVAL_HW, device=device)
    target = torch.randint(0, N_CLASSES, (2, *EVAL_HW), device=device)
    cm = confusion(tta(images, bf16=True).argmax(1), target)
print(f"bf16 TTA correct pixels {cm.diag().sum().item()} of {cm.sum().item()}")
if device == "cuda":
    print(f"bf16 TTA peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
