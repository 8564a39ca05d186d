"""A DETR-style detector written by hand: torchvision ResNet-50 backbone (frozen BN), 1x1
projection, nn.Transformer (6+6 layers, 256 wide, batch_first) over the flattened feature map with
sine positions, 100 learned queries, class and box heads; cross-entropy, L1 and generalized IoU
losses against a fixed assignment; AdamW with a lower backbone learning rate and gradient clipping
at 0.1; batch 4 of 640x640, fp32, 2 steps; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import generalized_box_iou_loss

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5703)
B, HW, D, Q = (1, 64, 32, 10) if SMALL else (4, 640, 256, 100)


class Detr(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet50(weights=None, norm_layer=torchvision.ops.FrozenBatchNorm2d)
        self.backbone = nn.Sequential(*list(r.children())[:-2])
        self.proj = nn.Conv2d(2048, D, 1)
        self.transformer = nn.Transformer(D, 8, 6, 6, 4 * D, dropout=0.1, batch_first=True)
        self.queries = nn.Parameter(torch.randn(Q, D))
        self.cls = nn.Linear(D, 92)
        self.box = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 4))

    def pos(self, h, w, device):
        y = torch.arange(h, device=device, dtype=torch.float32)[:, None].expand(h, w)
        x = torch.arange(w, device=device, dtype=torch.float32)[None, :].expand(h, w)
        freq = torch.exp(torch.arange(0, D // 2, 2, device=device) * (-math.log(10000.0) / (D // 2)))
        parts = [f(t[..., None] * freq) for t in (y, x) for f in (torch.sin, torch.cos)]
        return torch.cat(parts, dim=-1).reshape(h * w, D)

    def forward(self, x):
        f = self.proj(self.backbone(x))
        b, _, h, w = f.shape
        src = f.flatten(2).transpose(1, 2) + self.pos(h, w, x.device)
        hs = self.transformer(src, self.queries.unsqueeze(0).expand(b, -1, -1))
        return self.cls(hs), self.box(hs).sigmoid()


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Detr().to(device)
backbone = [p for n, p in model.named_parameters() if n.startswith("backbone")]
rest = [p for n, p in model.named_parameters() if not n.startswith("backbone")]
optimizer = torch.optim.AdamW(
    [{"params": backbone, "lr": 1e-5}, {"params": rest}], lr=1e-4, weight_decay=1e-4
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img = torch.randn(B, 3, HW, HW, device=device)
    labels = torch.randint(0, 92, (B, Q), device=device)
    cxcy = torch.rand(B, Q, 2, device=device) * 0.5 + 0.25
    wh = torch.rand(B, Q, 2, device=device) * 0.2 + 0.05
    target = torch.cat([cxcy - wh / 2, cxcy + wh / 2], dim=-1)
    logits, boxes = model(img)
    pred = torch.cat([boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2], dim=-1)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten()) + 5 * F.l1_loss(pred, target)
    loss = loss + 2 * generalized_box_iou_loss(pred.flatten(0, 1), target.flatten(0, 1), reduction="mean")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del img, labels, cxcy, wh, target, logits, boxes, pred, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
