"""DeepLabV3 with a ResNet-101 backbone and the auxiliary FCN head from torchvision
(`deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=19, aux_loss=True)`, output
stride 8 through dilated layer3/layer4), trained Cityscapes-style on random 768 x 768 crops at batch 8
in channels_last under bf16 autocast: OHEM cross-entropy as in mmseg's OHEMPixelSampler (per-pixel
losses with ignore_index=255, keep the pixels whose loss is above the threshold or at least the
100,000 hardest of the batch, by a sort of the detached losses), plus 0.4 x plain cross-entropy on the
aux head. SGD momentum 0.9, weight decay 1e-4, lr 0.01 with a poly schedule (power 0.9) by LambdaLR.
Labels are int64 on the device with about 10% ignore pixels. Phases: the first step; 3 steady steps;
sliding-window inference under inference_mode on two 1024 x 2048 images (768 x 768 windows, stride 512,
bf16 autocast, logits summed into an fp32 (1, 19, H, W) map and a count map, then argmax); and a BN
re-estimation pass (train mode, no_grad, momentum None = cumulative average) over 2 batches."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_resnet101

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18401)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, CROP, STEPS, H, W, WIN, STRIDE, MIN_KEPT = 2, 128, 3, 160, 320, 128, 96, 1000
else:
    B, CROP, STEPS, H, W, WIN, STRIDE, MIN_KEPT = 8, 768, 4, 1024, 2048, 768, 512, 100000
NUM_CLASSES = 19
IGNORE = 255


def ohem_cross_entropy(logits, labels, thresh=0.7, min_kept=MIN_KEPT):
    pixel_losses = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="none").flatten()
    valid = labels.flatten() != IGNORE
    with torch.no_grad():
        probs = F.softmax(logits, dim=1)
        tmp_labels = labels.clone()
        tmp_labels[tmp_labels == IGNORE] = 0
        seg_prob = probs.gather(1, tmp_labels.unsqueeze(1)).flatten()
        sort_prob, _ = seg_prob[valid].sort()
        kept = min(min_kept, sort_prob.numel() - 1)
        threshold = torch.clamp(sort_prob[kept], min=thresh)
        weight = (seg_prob < threshold) & valid
    return (pixel_losses * weight).sum() / weight.sum().clamp(min=1)


def batch(bs, size):
    images = torch.randn(bs, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, NUM_CLASSES, (bs, size, size), device=device)
    labels[torch.rand(bs, size, size, device=device) < 0.1] = IGNORE
    return images, labels


model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=True)
model = model.to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
max_iter = 40000
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: (1 - it / max_iter) ** 0.9)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

model.train()
for step in range(STEPS):
    images, labels = batch(B, CROP)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(images)
        loss = ohem_cross_entropy(out["out"].float(), labels) + 0.4 * F.cross_entropy(
            out["aux"].float(), labels, ignore_index=IGNORE
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.6f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del out, loss, images, labels
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def slide_inference(net, img, win, stride, num_classes):
    _, _, h, w = img.shape
    logits = torch.zeros(1, num_classes, h, w, device=img.device)
    count = torch.zeros(1, 1, h, w, device=img.device)
    h_grids = max(h - win + stride - 1, 0) // stride + 1
    w_grids = max(w - win + stride - 1, 0) // stride + 1
    for hi in range(h_grids):
        for wi in range(w_grids):
            y1 = min(hi * stride, h - win)
            x1 = min(wi * stride, w - win)
            crop = img[:, :, y1 : y1 + win, x1 : x1 + win]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                crop_logits = net(crop)["out"]
            logits[:, :, y1 : y1 + win, x1 : x1 + win] += crop_logits.float()
            count[:, :, y1 : y1 + win, x1 : x1 + win] += 1
    return logits / count


model.eval()
with torch.inference_mode():
    for i in range(2):
        image = torch.randn(1, 3, H, W, device=device).contiguous(memory_format=torch.channels_last)
        probs = slide_inference(model, image, WIN, STRIDE, NUM_CLASSES).softmax(dim=1)
        pred = probs.argmax(dim=1)
        conf = probs.max(dim=1).values.mean().item()
        print(f"image {i} pred classes {pred.unique().numel()} mean conf {conf:.3f}")
del image, probs, pred
if device == "cuda":
    print(f"slide peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# precise BN: re-estimate the running statistics with a cumulative average
for m in model.modules():
    if isinstance(m, torch.nn.BatchNorm2d):
        m.reset_running_stats()
        m.momentum = None
model.train()
with torch.no_grad():
    for _ in range(2):
        images, _labels = batch(B, CROP)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            model(images)
bn = model.backbone.bn1
print(f"bn1 batches {int(bn.num_batches_tracked)} mean {bn.running_mean.mean().item():.4f}")
if device == "cuda":
    print(
        f"precise-bn allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
