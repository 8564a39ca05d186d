"""ViTDet-style dense prediction on a plain ViT from timm: ``vit_medium_patch16_reg4_gap_256`` (four
register tokens, global average pooling, 12 blocks of width 512) created with
``dynamic_img_size=True`` and no head; its ``forward_intermediates(indices=[2, 5, 8, 11],
intermediates_only=True)`` feature maps (register tokens dropped, NCHW at stride 16) feed a by-hand
simple feature pyramid (ConvTranspose2d x2 and x4, identity, max-pool) and a light FPN-style
semantic-segmentation head with bilinear upsampling to the input size and an ignore index. The
optimizer is ``timm.optim.create_optimizer_v2`` with ``layer_decay=0.75`` applied to the backbone
(per-block parameter groups) plus a group for the head; gradient checkpointing is on in the ViT
blocks (``set_grad_checkpointing``); bf16 autocast; clip_grad_norm_.

Phases: 0 model and optimizer; 1 three training steps of batch 16 at 256 x 256, 150 classes;
2 eval at 256 under no_grad (argmax masks, mIoU-ish counts); 3 eval at 384 x 512 under
inference_mode (the patch grid changes, position embeddings resampled on the fly)."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(3154)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 150
B, R = 16, 256


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class SimpleFeaturePyramid(nn.Module):
    def __init__(self, dim, out=256):
        super().__init__()
        self.up4 = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 2, 2, stride=2),
            nn.GroupNorm(32, dim // 2),
            nn.GELU(),
            nn.ConvTranspose2d(dim // 2, dim // 4, 2, stride=2),
        )
        self.up2 = nn.ConvTranspose2d(dim, dim // 2, 2, stride=2)
        self.down2 = nn.MaxPool2d(2)
        chans = [dim // 4, dim // 2, dim, dim]
        self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in chans)
        self.smooth = nn.ModuleList(
            nn.Sequential(nn.Conv2d(out, out, 3, padding=1, bias=False), nn.GroupNorm(32, out), nn.ReLU())
            for _ in chans
        )

    def forward(self, feats):
        f1, f2, f3, f4 = feats
        levels = [self.up4(f1), self.up2(f2), f3, self.down2(f4)]
        return [smooth(lat(x)) for x, lat, smooth in zip(levels, self.lateral, self.smooth, strict=True)]


class SegHead(nn.Module):
    def __init__(self, ch=256, num_classes=NUM_CLASSES):
        super().__init__()
        self.fuse = nn.Sequential(
            nn.Conv2d(4 * ch, ch, 3, padding=1, bias=False), nn.GroupNorm(32, ch), nn.ReLU()
        )
        self.cls = nn.Conv2d(ch, num_classes, 1)

    def forward(self, pyramid):
        size = pyramid[0].shape[-2:]
        up = [pyramid[0]] + [
            F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in pyramid[1:]
        ]
        return self.cls(self.fuse(torch.cat(up, dim=1)))


class ViTSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model(
            "vit_medium_patch16_reg4_gap_256",
            pretrained=False,
            num_classes=0,
            dynamic_img_size=True,
            drop_path_rate=0.1,
        )
        self.neck = SimpleFeaturePyramid(self.backbone.embed_dim)
        self.head = SegHead()

    def forward(self, x):
        feats = self.backbone.forward_intermediates(x, indices=[2, 5, 8, 11], intermediates_only=True)
        logits = self.head(self.neck(feats))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


model = ViTSeg().to(device)
model.backbone.set_grad_checkpointing(True)
backbone_groups = create_optimizer_v2(
    model.backbone, "adamw", lr=2e-4, weight_decay=0.05, layer_decay=0.75
).param_groups
head_params = list(model.neck.parameters()) + list(model.head.parameters())
opt = torch.optim.AdamW([*backbone_groups, {"params": head_params, "lr": 1e-3}], lr=2e-4, weight_decay=0.05)
report("model")

model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, NUM_CLASSES, (B, R, R), device=device)
    y[:, :16] = 255
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y, ignore_index=255)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} groups {len(opt.param_groups)}")
    del x, y, logits, loss
report("train")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(24, 3, R, R, device=device)
    y = torch.randint(0, NUM_CLASSES, (24, R, R), device=device)
    pred = model(x).argmax(1)
    inter = torch.bincount(pred[pred == y], minlength=NUM_CLASSES)
    union = (
        torch.bincount(pred.flatten(), minlength=NUM_CLASSES)
        + torch.bincount(y.flatten(), minlength=NUM_CLASSES)
        - inter
    )
if device == "cuda":
    print(f"eval miou {(inter.float() / union.clamp(min=1).float()).mean().item():.5f}")
del x, y, pred, inter, union
report("eval256")

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(8, 3, 384, 512, device=device)
    masks = model(x).argmax(1)
if device == "cuda":
    print(f"eval384 {tuple(masks.shape)} classes {masks.unique().numel()}")
report("eval384")
