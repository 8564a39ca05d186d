"""PSPNet (Zhao et al. 2017) written by hand on torchvision's ResNet-50 with dilated layer3/layer4
(`resnet50(weights=None, replace_stride_with_dilation=[False, True, True])`, output stride 8): the
pyramid pooling module (adaptive average pools to 1, 2, 3 and 6, 1x1 conv to 512 + BatchNorm + ReLU,
bilinear upsampling, concatenation with the 2,048-channel features), a 3x3 conv of 512 + BN + ReLU +
Dropout2d(0.1) and a 1x1 classifier, plus the auxiliary FCN head on layer3 (weight 0.4). Training in
fp32 on random 713 x 713 crops at batch 8 (150 ADE20K classes, ignore_index 255 on ~8% of pixels),
each bottleneck of layer3 and layer4 run through torch.utils.checkpoint (use_reentrant=False) to save
activations, SGD momentum 0.9 (weight decay 1e-4, lr 0.01, 10x on the heads) with a poly LambdaLR
(power 0.9). Phases: the first step; 2 more steps; then a fine-tuning stage with the backbone's
BatchNorm layers in eval mode and their affine parameters frozen, 2 micro-batches of 4 per step
(losses divided by 2), 2 steps; then `del` of the optimizer, gc + torch.cuda.empty_cache(), the model
cast to half() and whole-image inference under inference_mode on 2 images of 1024 x 2048 with
horizontal-flip averaging of the softmaxes, argmax to uint8; 4 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torchvision.models import resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18406)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, CROP, STEPS, FT_B, H, W = 2, 97, 2, 2, 128, 256
else:
    B, CROP, STEPS, FT_B, H, W = 8, 713, 3, 4, 1024, 2048
NUM_CLASSES = 150


class PPM(nn.Module):
    def __init__(self, in_dim, reduction_dim, bins):
        super().__init__()
        self.features = nn.ModuleList(
            nn.Sequential(
                nn.AdaptiveAvgPool2d(b),
                nn.Conv2d(in_dim, reduction_dim, 1, bias=False),
                nn.BatchNorm2d(reduction_dim),
                nn.ReLU(inplace=True),
            )
            for b in bins
        )

    def forward(self, x):
        size = x.shape[-2:]
        out = [x]
        for f in self.features:
            out.append(F.interpolate(f(x), size, mode="bilinear", align_corners=True))
        return torch.cat(out, 1)


class PSPNet(nn.Module):
    def __init__(self, num_classes, use_checkpoint=True):
        super().__init__()
        r = resnet50(weights=None, replace_stride_with_dilation=[False, True, True])
        self.layer0 = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.layer1, self.layer2, self.layer3, self.layer4 = r.layer1, r.layer2, r.layer3, r.layer4
        self.ppm = PPM(2048, 512, (1, 2, 3, 6))
        self.cls = nn.Sequential(
            nn.Conv2d(4096, 512, 3, padding=1, bias=False),
            nn.BatchNorm2d(512),
            nn.ReLU(inplace=True),
            nn.Dropout2d(0.1),
            nn.Conv2d(512, num_classes, 1),
        )
        self.aux = nn.Sequential(
            nn.Conv2d(1024, 256, 3, padding=1, bias=False),
            nn.BatchNorm2d(256),
            nn.ReLU(inplace=True),
            nn.Dropout2d(0.1),
            nn.Conv2d(256, num_classes, 1),
        )
        self.use_checkpoint = use_checkpoint

    def run_layer(self, layer, x):
        for block in layer:
            if self.use_checkpoint and self.training and x.requires_grad:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def forward(self, x):
        h, w = x.shape[-2:]
        x = self.layer2(self.layer1(self.layer0(x)))
        x3 = self.run_layer(self.layer3, x)
        x4 = self.run_layer(self.layer4, x3)
        out = F.interpolate(self.cls(self.ppm(x4)), (h, w), mode="bilinear", align_corners=True)
        if self.training:
            aux = F.interpolate(self.aux(x3), (h, w), mode="bilinear", align_corners=True)
            return out, aux
        return out


def ade_batch(bs, size):
    images = torch.randn(bs, 3, size, size, device=device)
    labels = torch.randint(0, NUM_CLASSES, (bs, size, size), device=device)
    labels[torch.rand(bs, size, size, device=device) < 0.08] = 255
    return images, labels


model = PSPNet(NUM_CLASSES).to(device)
backbone = [p for n, p in model.named_parameters() if n.startswith("layer")]
heads = [p for n, p in model.named_parameters() if not n.startswith("layer")]
optimizer = torch.optim.SGD(
    [{"params": backbone, "lr": 0.01}, {"params": heads, "lr": 0.1}], momentum=0.9, weight_decay=1e-4
)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: (1 - it / 150000) ** 0.9)
criterion = nn.CrossEntropyLoss(ignore_index=255)
print(f"pspnet params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

model.train()
for step in range(STEPS):
    images, labels = ade_batch(B, CROP)
    out, aux = model(images)
    loss = criterion(out, labels) + 0.4 * criterion(aux, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, labels, out, aux, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# fine-tune with frozen backbone BatchNorm (small per-GPU batches)
for name, m in model.named_modules():
    if isinstance(m, nn.BatchNorm2d) and name.startswith("layer"):
        m.weight.requires_grad_(False)
        m.bias.requires_grad_(False)
for step in range(2):
    model.train()
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d) and name.startswith("layer"):
            m.eval()
    optimizer.zero_grad()
    for _ in range(2):
        images, labels = ade_batch(FT_B, CROP)
        out, aux = model(images)
        loss = (criterion(out, labels) + 0.4 * criterion(aux, labels)) / 2
        loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"finetune step {step} loss {loss.item() * 2:.4f}")
del images, labels, out, aux, loss
if device == "cuda":
    print(f"finetune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer, scheduler, backbone, heads
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
model = model.half().eval()
with torch.inference_mode():
    for i in range(2):
        image = torch.randn(1, 3, H, W, device=device, dtype=torch.float16)
        probs = model(image).softmax(dim=1)
        probs += model(image.flip(-1)).flip(-1).softmax(dim=1)
        pred = probs.argmax(dim=1).to(torch.uint8)
        mean_prob = (probs.max(dim=1).values / 2).float().mean().item()
        print(f"image {i} pred {tuple(pred.shape)} mean prob {mean_prob:.4f}")
if device == "cuda":
    print(
        f"inference allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
