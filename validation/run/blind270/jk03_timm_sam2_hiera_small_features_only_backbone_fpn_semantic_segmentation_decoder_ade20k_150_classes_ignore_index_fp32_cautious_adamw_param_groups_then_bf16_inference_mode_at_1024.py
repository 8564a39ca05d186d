"""Semantic segmentation with a timm backbone: SAM 2's Hiera-S image encoder (`timm.create_model(
"sam2_hiera_small", pretrained=False, features_only=True)`: hierarchical windowed attention with
query pooling between stages, global attention in blocks 7, 10 and 13, a bicubically interpolated
position embedding plus a tiled window embedding; features at strides 4, 8, 16 and 32 with 96, 192,
384 and 768 channels) under a small FPN decoder written by hand (1 x 1 laterals to 128 channels,
nearest top-down upsampling and addition, a 3 x 3 conv + BatchNorm + ReLU at stride 4, a 1 x 1
classifier to ADE20K's 150 classes, bilinear upsampling x 4 to the input), cross entropy with
`ignore_index=255` (random labels with about a tenth of the pixels ignored). fp32 training with
timm's cautious AdamW (`create_optimizer_v2` on two parameter groups: backbone lr 1e-4, decoder lr
1e-3, opt="cadamw"). Phase 1: 5 steps at batch 8 x 3 x 512 x 512. Phase 2: the per-pixel argmax of
2 x 1024 x 1024 images (SAM 2's native size: 4,096 tokens in the global-attention blocks) under
inference_mode and bf16 autocast. Seeded. 2 phases."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(2703)
dev = "cuda"
NUM_CLASSES = 150


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class FPNSegmenter(nn.Module):
    def __init__(self, backbone, dim=128, num_classes=NUM_CLASSES):
        super().__init__()
        self.backbone = backbone
        chans = backbone.feature_info.channels()
        self.laterals = nn.ModuleList(nn.Conv2d(c, dim, 1) for c in chans)
        self.fuse = nn.Sequential(
            nn.Conv2d(dim, dim, 3, padding=1, bias=False), nn.BatchNorm2d(dim), nn.ReLU(inplace=True)
        )
        self.classifier = nn.Conv2d(dim, num_classes, 1)

    def forward(self, x):
        feats = self.backbone(x)
        p = self.laterals[-1](feats[-1])
        for i in range(len(feats) - 2, -1, -1):
            lat = self.laterals[i](feats[i])
            p = lat + F.interpolate(p, size=lat.shape[-2:], mode="nearest")
        logits = self.classifier(self.fuse(p))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


backbone = timm.create_model("sam2_hiera_small", pretrained=False, features_only=True, drop_path_rate=0.1)
model = FPNSegmenter(backbone).to(dev)
decoder_params = [p for n, p in model.named_parameters() if not n.startswith("backbone.")]
optimizer = create_optimizer_v2(
    [{"params": list(model.backbone.parameters()), "lr": 1e-4}, {"params": decoder_params, "lr": 1e-3}],
    opt="cadamw",
    lr=1e-3,
    weight_decay=0.01,
)
model.train()
for _step in range(5):
    x = torch.randn(8, 3, 512, 512, device=dev)
    target = torch.randint(0, NUM_CLASSES, (8, 512, 512), device=dev)
    target[torch.rand(8, 512, 512, device=dev) < 0.1] = 255
    loss = F.cross_entropy(model(x), target, ignore_index=255)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("train", _step + 1, round(loss.item(), 3))
report("sam2_hiera_s_fpn_seg_fp32_cadamw_b8_512")

del x, target, loss
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(2, 3, 1024, 1024, device=dev)
    pred = model(x).argmax(1)
print("pred", tuple(pred.shape), pred.dtype, int(pred.max()))
report("sam2_hiera_s_fpn_seg_inference_mode_bf16_1024")
