"""A detection-style head on a transformer backbone with torchvision's losses: timm's
vit_small_patch16_224 features (all 196 patch tokens), a per-token class head (80 classes) trained
with torchvision.ops.sigmoid_focal_loss and a box head trained with generalized_box_iou_loss and
L1 against fixed per-token targets; bf16 autocast, AdamW (foreach), batch 32, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import generalized_box_iou_loss, sigmoid_focal_loss

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3603)
B, R, C = (2, 32, 5) if SMALL else (32, 224, 80)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        kw = dict(img_size=R, patch_size=16, embed_dim=32, depth=2, num_heads=4) if SMALL else {}
        self.backbone = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0, **kw)
        d = self.backbone.num_features
        self.cls = nn.Linear(d, C)
        self.box = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

    def forward(self, x):
        tokens = self.backbone.forward_features(x)[:, self.backbone.num_prefix_tokens :]
        return self.cls(tokens), self.box(tokens).sigmoid()


model = Detector().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    n = (R // 16) ** 2
    labels = F.one_hot(torch.randint(0, C, (B, n), device=device), C).float()
    xy = torch.rand(B, n, 2, device=device) * 0.5
    target = torch.cat([xy, xy + 0.1 + torch.rand(B, n, 2, device=device) * 0.4], -1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, boxes = model(x)
    cxcy, wh = boxes[..., :2].float(), boxes[..., 2:].float() * 0.5
    pred = torch.cat([cxcy - wh / 2, cxcy + wh / 2], -1)
    loss = (
        sigmoid_focal_loss(logits.float(), labels, reduction="mean")
        + generalized_box_iou_loss(pred.reshape(-1, 4), target.reshape(-1, 4), reduction="mean")
        + F.l1_loss(pred, target)
    )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, labels, xy, target, logits, boxes, cxcy, wh, pred, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
