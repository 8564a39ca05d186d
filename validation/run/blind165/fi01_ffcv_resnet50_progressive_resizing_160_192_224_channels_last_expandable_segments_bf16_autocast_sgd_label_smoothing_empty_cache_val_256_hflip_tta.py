"""Progressive-resizing ResNet-50 training as FFCV's ImageNet example (libffcv/ffcv-imagenet,
train_imagenet.py) runs it, with the caching allocator switched to expandable segments before torch is
imported (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): torchvision's resnet50 (1,000 classes) in
channels_last, bf16 autocast, SGD (lr 0.5 x batch/256, momentum 0.9, nesterov off, weight decay 5e-5
without it on BatchNorm), label smoothing 0.1, batch 128; the training resolution grows from 160 to
192 to 224 pixels (FFCV's get_resolution ramp), two steps at each, each resolution its own phase, then
torch.cuda.empty_cache() and a validation pass at 256 pixels (FFCV's val_res) at batch 256 under
inference_mode with test-time horizontal-flip augmentation, then torch.cuda.empty_cache() again and two
more steps at 176 pixels (a lower resolution than the cache last saw); 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16501)
if SMALL:
    BATCH, VAL_BATCH, RES_RAMP, VAL_RES, LAST_RES, STEPS = 4, 8, (32, 48, 64), 72, 40, 2
else:
    BATCH, VAL_BATCH, RES_RAMP, VAL_RES, LAST_RES, STEPS = 128, 256, (160, 192, 224), 256, 176, 2
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.resnet50(num_classes=1000)
model = model.to(device=device, memory_format=torch.channels_last)

# FFCV: no weight decay on BatchNorm parameters
bn_params, other_params = [], []
for name, p in model.named_parameters():
    (bn_params if ("bn" in name or "downsample.1" in name) else other_params).append(p)
param_groups = [
    {"params": bn_params, "weight_decay": 0.0},
    {"params": other_params, "weight_decay": 5e-5},
]
optimizer = torch.optim.SGD(param_groups, lr=0.5 * BATCH / 256, momentum=0.9)
loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)

mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255


def loader_batch(batch, res):
    # FFCV hands uint8 NHWC images; ToTensor/ToDevice/ToTorchImage then NormalizeImage on the GPU
    images = torch.randint(0, 256, (batch, res, res, 3), dtype=torch.uint8).to(device, non_blocking=True)
    images = images.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    images = ((images.float() - mean) / std).to(memory_format=torch.channels_last)
    targets = torch.randint(0, 1000, (batch,)).to(device, non_blocking=True)
    return images, targets


def train_steps(res, steps):
    model.train()
    for _ in range(steps):
        images, target = loader_batch(BATCH, res)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            output = model(images)
            loss = loss_fn(output, target)
        loss.backward()
        optimizer.step()
    return loss.item()


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


for res in RES_RAMP:
    loss = train_steps(res, STEPS)
    print(f"res {res} loss {loss:.4f}")
    report(f"train {res}")

if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
correct = 0
with torch.inference_mode():
    for _ in range(2):
        images, target = loader_batch(VAL_BATCH, VAL_RES)
        with torch.autocast(device, dtype=torch.bfloat16):
            output = model(images)
            output = output + model(torch.flip(images, dims=[3]))
        correct += (output.argmax(dim=1) == target).sum().item()
print(f"val top1 {correct / (2 * VAL_BATCH):.4f}")
report("val")

if device == "cuda":
    torch.cuda.empty_cache()
loss = train_steps(LAST_RES, STEPS)
print(f"res {LAST_RES} loss {loss:.4f}")
report(f"train {LAST_RES}")
