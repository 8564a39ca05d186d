"""Semantic segmentation with its paired image/mask augmentation on the GPU through
torchvision.tv_tensors, as the v2 transforms guide describes: a DataLoader (pin_memory=True,
num_workers=0) of uint8 images (3, 512, 683) and uint8 label masks, the batch copied non_blocking
and wrapped as tv_tensors.Image and tv_tensors.Mask on the device; one v2.Compose applied jointly
(RandomResizedCrop to 384 with scale (0.25, 1.0), the mask resized nearest;
RandomHorizontalFlip; ColorJitter on the image only; ToDtype with a per-type dict scaling the image
to float32 and leaving the mask; Normalize), the mask turned to long; torchvision's DeepLabV3 with
a ResNet-50 backbone (output stride 8, aux classifier, 21 classes, random init) in fp32 with TF32
matmuls and convolutions, Adam with a poly LambdaLR, cross-entropy with ignore_index 255 plus 0.4 of
the aux loss; batch 12, 4 steps; then inference at full resolution (batch 4 of 512 x 683, the
logits upsampled and argmax'd) under inference_mode; 6 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15205)
B, H, W, CROP, STEPS, NCLS = (2, 64, 86, 48, 4, 5) if SMALL else (12, 512, 683, 384, 4, 21)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class SegSet(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        img = torch.randint(0, 256, (3, H, W), dtype=torch.uint8, generator=g)
        mask = torch.randint(0, NCLS, (H, W), dtype=torch.uint8, generator=g)
        mask[:8] = 255  # a void border, as VOC's
        return img, mask


joint = v2.Compose(
    [
        v2.RandomResizedCrop(CROP, scale=(0.25, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
to_float = v2.Compose(
    [
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)

model = torchvision.models.segmentation.deeplabv3_resnet50(
    weights=None, weights_backbone=None, num_classes=NCLS, aux_loss=True
).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (1 - s / STEPS) ** 0.9)
loader = DataLoader(SegSet(B * STEPS), batch_size=B, shuffle=True, num_workers=0, pin_memory=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step, (img, mask) in enumerate(loader):
    img = tv_tensors.Image(img.to(device, non_blocking=True))
    mask = tv_tensors.Mask(mask.to(device, non_blocking=True))
    img, mask = joint(img, mask)
    target = mask.as_subclass(torch.Tensor).long()
    out = model(img.as_subclass(torch.Tensor))
    loss = F.cross_entropy(out["out"], target, ignore_index=255)
    loss = loss + 0.4 * F.cross_entropy(out["aux"], target, ignore_index=255)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    del img, mask, target, out
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

model.eval()
eval_loader = DataLoader(SegSet(4), batch_size=4, num_workers=0, pin_memory=True)
pixels = 0
with torch.inference_mode():
    for img, mask in eval_loader:
        x = to_float(img.to(device, non_blocking=True))
        logits = model(x)["out"]
        pred = logits.argmax(1)
        pixels += int((pred == mask.to(device, non_blocking=True).long()).sum())
        del x, logits, pred
if device == "cuda":
    print(
        f"eval pixels {pixels} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
