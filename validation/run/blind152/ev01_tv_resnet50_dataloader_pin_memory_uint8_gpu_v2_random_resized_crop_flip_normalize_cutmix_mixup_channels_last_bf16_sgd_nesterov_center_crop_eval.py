"""An ImageNet-style ResNet-50 training loop whose augmentation runs on the GPU, as DALI-less users
write it with torchvision.transforms.v2: a map-style dataset returning decoded uint8 (3, 256, 256)
images (as torchvision.io.decode_jpeg gives them), a DataLoader with pin_memory=True and
num_workers=0, each batch copied non_blocking to the GPU and augmented there as one batch
(v2.RandomResizedCrop to 224 with antialias, v2.RandomHorizontalFlip, v2.ToDtype to float32 scaled,
v2.Normalize), then v2.RandomChoice of v2.CutMix and v2.MixUp on the batch and its labels, the
result made channels_last; torchvision's ResNet-50 in channels_last under bf16 autocast, SGD with
Nesterov momentum and weight decay, a OneCycleLR schedule, batch 128, 6 steps; then an evaluation
of 2 batches (v2.Resize(256) and v2.CenterCrop(224) on the GPU) under inference_mode; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15201)
B, SRC, CROP, STEPS, NCLS = (4, 72, 64, 4, 10) if SMALL else (128, 256, 224, 6, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.backends.cudnn.benchmark = False


class DecodedImages(Dataset):
    """Stands in for an ImageFolder whose loader is torchvision.io.decode_jpeg: uint8 CHW."""

    def __init__(self, n):
        self.n = n
        self.labels = torch.randint(0, NCLS, (n,))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, SRC, SRC), dtype=torch.uint8, generator=g)
        return img, int(self.labels[i])


train_set = DecodedImages(B * STEPS)
val_set = DecodedImages(B * 2)
train_loader = DataLoader(
    train_set, batch_size=B, shuffle=True, num_workers=0, pin_memory=True, drop_last=True
)
val_loader = DataLoader(val_set, batch_size=B, shuffle=False, num_workers=0, pin_memory=True)

gpu_train_tf = v2.Compose(
    [
        v2.RandomResizedCrop(CROP, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
gpu_val_tf = v2.Compose(
    [
        v2.Resize(SRC, antialias=True),
        v2.CenterCrop(CROP),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
cutmix_or_mixup = v2.RandomChoice(
    [v2.CutMix(num_classes=NCLS, alpha=1.0), v2.MixUp(num_classes=NCLS, alpha=0.2)]
)

model = torchvision.models.resnet50(num_classes=NCLS)
model = model.to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.4, total_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step, (img, label) in enumerate(train_loader):
    img = img.to(device, non_blocking=True)
    label = label.to(device, non_blocking=True)
    x = gpu_train_tf(img)
    x, soft = cutmix_or_mixup(x, label)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, soft)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda" and step % 2 == 1:
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del img, label, x, soft, logits, loss
model.eval()
correct = total = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    for img, label in val_loader:
        img = img.to(device, non_blocking=True)
        label = label.to(device, non_blocking=True)
        x = gpu_val_tf(img).contiguous(memory_format=torch.channels_last)
        pred = model(x).argmax(dim=1)
        correct += int((pred == label).sum())
        total += label.numel()
if device == "cuda":
    print(
        f"eval acc {correct / total:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
