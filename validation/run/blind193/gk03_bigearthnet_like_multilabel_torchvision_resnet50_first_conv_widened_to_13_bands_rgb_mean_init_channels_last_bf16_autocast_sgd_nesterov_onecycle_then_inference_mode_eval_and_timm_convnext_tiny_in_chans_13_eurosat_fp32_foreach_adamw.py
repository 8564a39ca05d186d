"""Multispectral scene classification with ImageNet-style backbones widened to 13 Sentinel-2 bands.

Part 1, BigEarthNet-like multi-label classification (19 land-cover classes): torchvision resnet50 (random
init) whose first convolution is replaced by a 13-input-channel 7x7 conv initialized from the RGB kernel's
channel mean repeated over the 13 bands (scaled by 3/13), fc replaced by a 19-way linear head.
Tiles of 13 x 128 x 128 (bands resampled to 10 m) made on the device as float16 reflectances, normalized
per band, channels_last, bf16 autocast, BCEWithLogits on multi-hot labels, SGD momentum 0.9 nesterov with
weight decay 1e-4 under a OneCycleLR schedule (per step), batch 128.

Part 2, EuroSAT-like 10-class classification at 64 x 64: timm convnext_tiny with in_chans=13, drop_path
0.1, fp32, AdamW foreach (lr 4e-4, weight decay 0.05), label smoothing 0.1, batch 192.

Phases: the first resnet50 step; 4 more steps; evaluation of 512 tiles under torch.inference_mode and bf16
autocast in batches of 256 with sigmoid scores moved to the host and micro-F1 at 0.5 computed there; then
3 ConvNeXt-T steps. 4 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19303)
if SMALL:
    B, STEPS, TILE, EVAL_N, EVAL_B, CX_B, CX_TILE = 4, 1, 64, 8, 4, 4, 32
else:
    B, STEPS, TILE, EVAL_N, EVAL_B, CX_B, CX_TILE = 128, 4, 128, 512, 256, 192, 64
BANDS, N_LABELS, N_EUROSAT = 13, 19, 10
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

mean = torch.linspace(400.0, 2600.0, BANDS, device=device)[None, :, None, None]
std = torch.linspace(300.0, 1500.0, BANDS, device=device)[None, :, None, None]


def widen_first_conv(conv, bands):
    new = nn.Conv2d(bands, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=False)
    with torch.no_grad():
        w = conv.weight.mean(1, keepdim=True).repeat(1, bands, 1, 1) * (3.0 / bands)
        new.weight.copy_(w)
    return new


def s2_tiles(n, size):
    raw = torch.randint(0, 8000, (n, BANDS, size, size), device=device).half()
    return ((raw.float() - mean) / std).contiguous(memory_format=torch.channels_last)


net = torchvision.models.resnet50(num_classes=1000)
net.conv1 = widen_first_conv(net.conv1, BANDS)
net.fc = nn.Linear(net.fc.in_features, N_LABELS)
net = net.to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=STEPS + 1)
print(f"resnet50-13band params {sum(p.numel() for p in net.parameters())}")


def rn_step():
    x = s2_tiles(B, TILE)
    y = (torch.rand(B, N_LABELS, device=device) < 0.15).float()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.binary_cross_entropy_with_logits(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


net.train()
print(f"step 0 loss {rn_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = rn_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net.eval()
scores, labels = [], []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _i in range(0, EVAL_N, EVAL_B):
        x = s2_tiles(EVAL_B, TILE)
        scores.append(torch.sigmoid(net(x).float()).cpu())
        labels.append((torch.rand(EVAL_B, N_LABELS) < 0.15).float())
scores, labels = torch.cat(scores), torch.cat(labels)
pred = (scores > 0.5).float()
tp = (pred * labels).sum()
micro_f1 = 2 * tp / (pred.sum() + labels.sum())
print(f"eval micro-F1 {micro_f1:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

cx = timm.create_model(
    "convnext_tiny", pretrained=False, in_chans=BANDS, num_classes=N_EUROSAT, drop_path_rate=0.1
)
cx = cx.to(device)
cx_opt = torch.optim.AdamW(cx.parameters(), lr=4e-4, weight_decay=0.05, foreach=True)
cx.train()
for s in range(3):
    x = s2_tiles(CX_B, CX_TILE).contiguous()
    y = torch.randint(0, N_EUROSAT, (CX_B,), device=device)
    loss = F.cross_entropy(cx(x), y, label_smoothing=0.1)
    cx_opt.zero_grad(set_to_none=True)
    loss.backward()
    cx_opt.step()
    print(f"convnext step {s} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"convnext allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
