"""Two torchvision segmentation models, no weights. First LRASPP on MobileNetV3-Large
(`lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)`, Pascal VOC classes)
trained on random 512 x 512 crops at batch 32 under fp16 autocast with torch.amp.GradScaler: a focal
loss written by hand (gamma 2, from the per-pixel cross-entropy with ignore_index=255 and
pt = exp(-ce), averaged over the valid pixels), Adam (lr 5e-4, weight decay 1e-5), a first step then 3
steady steps. Then the model in half() under inference_mode at batch 64 on 512 x 512 fp16 images,
the softmax's max as a confidence and a uint8 prediction. Then FCN-ResNet50 with the auxiliary head
(`fcn_resnet50(weights=None, weights_backbone=None, num_classes=21, aux_loss=True)`) in fp32 with TF32
matmuls and convolutions allowed, channels_last, fine-tuned at batch 8 on 480 x 480 with the backbone's
BatchNorm layers frozen (eval mode, no grad on their affine parameters, as small-batch fine-tuning
does), forward hooks on layer1..layer4 keeping each stage's output norm (detached) for logging, SGD
momentum 0.9 nesterov, loss = CE(out) + 0.5 x CE(aux); 2 steps; then whole-model eval under no_grad at
batch 4 on 512 x 683; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import fcn_resnet50, lraspp_mobilenet_v3_large

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18404)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    LB, LS, STEPS, IB, FB, FS, EB, EH, EW = 2, 128, 2, 2, 2, 128, 1, 128, 171
else:
    LB, LS, STEPS, IB, FB, FS, EB, EH, EW = 32, 512, 4, 64, 8, 480, 4, 512, 683
NUM_CLASSES = 21
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def voc_batch(bs, h, w):
    images = torch.randn(bs, 3, h, w, device=device)
    labels = torch.randint(0, NUM_CLASSES, (bs, h, w), device=device)
    # object boundaries are marked 255 in VOC: a band of ignore pixels
    labels[:, h // 2 - 2 : h // 2 + 2, :] = 255
    return images, labels


def focal_loss(logits, labels, gamma=2.0, ignore_index=255):
    ce = F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="none")
    pt = torch.exp(-ce)
    loss = (1 - pt) ** gamma * ce
    valid = (labels != ignore_index).float()
    return (loss * valid).sum() / valid.sum().clamp(min=1.0)


lraspp = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=NUM_CLASSES).to(device)
optimizer = torch.optim.Adam(lraspp.parameters(), lr=5e-4, weight_decay=1e-5)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
print(f"lraspp params {sum(p.numel() for p in lraspp.parameters()) / 1e6:.2f}M")

lraspp.train()
for step in range(STEPS):
    images, labels = voc_batch(LB, LS, LS)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits = lraspp(images)["out"]
        loss = focal_loss(logits.float(), labels)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"lraspp step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, labels, logits, loss
if device == "cuda":
    print(f"lraspp train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

lraspp = lraspp.half().eval()
with torch.inference_mode():
    images = torch.randn(IB, 3, LS, LS, device=device, dtype=torch.float16)
    probs = lraspp(images)["out"].softmax(dim=1)
    conf, pred = probs.max(dim=1)
    pred = pred.to(torch.uint8)
    print(f"half inference conf {conf.float().mean().item():.4f} pred {tuple(pred.shape)}")
del images, probs, conf, pred
if device == "cuda":
    print(f"half inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del lraspp, optimizer, scaler
fcn = fcn_resnet50(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=True)
fcn = fcn.to(device).to(memory_format=torch.channels_last)
for m in fcn.backbone.modules():
    if isinstance(m, torch.nn.BatchNorm2d):
        m.weight.requires_grad_(False)
        m.bias.requires_grad_(False)

stage_norms = {}


def keep_norm(name):
    def hook(module, inputs, output):
        stage_norms[name] = output.detach().float().norm()

    return hook


handles = [
    getattr(fcn.backbone, f"layer{i}").register_forward_hook(keep_norm(f"layer{i}")) for i in range(1, 5)
]
params = [p for p in fcn.parameters() if p.requires_grad]
fcn_opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)


def freeze_bn(model):
    for m in model.backbone.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eval()


for step in range(2):
    fcn.train()
    freeze_bn(fcn)
    images, labels = voc_batch(FB, FS, FS)
    images = images.contiguous(memory_format=torch.channels_last)
    out = fcn(images)
    loss = F.cross_entropy(out["out"], labels, ignore_index=255) + 0.5 * F.cross_entropy(
        out["aux"], labels, ignore_index=255
    )
    fcn_opt.zero_grad()
    loss.backward()
    fcn_opt.step()
    norms = " ".join(f"{k}={v.item():.1f}" for k, v in stage_norms.items())
    print(f"fcn step {step} loss {loss.item():.4f} {norms}")
del images, labels, out, loss
if device == "cuda":
    print(f"fcn train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for h in handles:
    h.remove()
fcn.eval()
with torch.no_grad():
    images = torch.randn(EB, 3, EH, EW, device=device).contiguous(memory_format=torch.channels_last)
    out = fcn(images)
    pred = out["out"].argmax(dim=1)
    print(f"fcn eval pred {tuple(pred.shape)} aux {tuple(out['aux'].shape)}")
if device == "cuda":
    print(
        f"fcn eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
