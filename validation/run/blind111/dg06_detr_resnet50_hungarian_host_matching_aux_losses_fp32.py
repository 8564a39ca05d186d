"""DETR, hand-written: a torchvision ResNet-50 trunk from random weights with frozen BatchNorm, a 1x1
projection to 256 channels plus a 2-D sine position encoding, nn.Transformer's 6 encoder and 6 decoder
layers (run layer by layer to keep every decoder output), 100 learned queries, class and 3-layer box
heads on each decoder layer (auxiliary losses); each layer's predictions matched to the targets by
the Hungarian algorithm on the host (class, L1 and GIoU costs built on the GPU, moved with .cpu(),
solved per image in Python); cross-entropy with a down-weighted no-object class, L1 and GIoU box
losses; AdamW with a 10x smaller learning rate on the trunk, gradient clipping at 0.1; batch 8 of
640x832 images with 1 to 12 boxes each, fp32, 3 steps; then inference with the top-scoring boxes
kept; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import FrozenBatchNorm2d, box_convert, generalized_box_iou

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11106)
B, H, W, D, NQ, LAYERS, STEPS = (2, 128, 160, 64, 20, 2, 1) if SMALL else (8, 640, 832, 256, 100, 6, 3)
NCLS = 91
device = "cuda" if torch.cuda.is_available() else "cpu"


class DETR(nn.Module):
    def __init__(self):
        super().__init__()
        trunk = torchvision.models.resnet50(weights=None, norm_layer=FrozenBatchNorm2d)
        self.backbone = nn.Sequential(*list(trunk.children())[:-2])
        self.proj = nn.Conv2d(2048, D, 1)
        self.transformer = nn.Transformer(D, 8, LAYERS, LAYERS, 2048, 0.1, batch_first=True)
        self.query = nn.Embedding(NQ, D)
        self.cls = nn.Linear(D, NCLS + 1)
        self.box = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 4))

    @staticmethod
    def sine(h, w, d, dev):
        y = torch.arange(1, h + 1, device=dev, dtype=torch.float32)[:, None].expand(h, w) / h * 2 * math.pi
        x = torch.arange(1, w + 1, device=dev, dtype=torch.float32)[None, :].expand(h, w) / w * 2 * math.pi
        t = 10000 ** (2 * (torch.arange(d // 2, device=dev) // 2) / (d // 2))
        px, py = x[..., None] / t, y[..., None] / t
        px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], -1).flatten(2)
        py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], -1).flatten(2)
        return torch.cat([py, px], -1).flatten(0, 1)

    def forward(self, x):
        f = self.proj(self.backbone(x))
        b, d, h, w = f.shape
        src = f.flatten(2).transpose(1, 2) + self.sine(h, w, d, f.device)
        memory = self.transformer.encoder(src)
        tgt = self.query.weight.unsqueeze(0).expand(b, -1, -1)
        outs = []
        for layer in self.transformer.decoder.layers:
            tgt = layer(tgt, memory)
            outs.append(self.transformer.decoder.norm(tgt))
        hs = torch.stack(outs)
        return self.cls(hs), self.box(hs).sigmoid()


def hungarian(cost):
    """Rows (targets) <= columns (queries); returns the column given to each row (Kuhn-Munkres)."""
    n, m = len(cost), len(cost[0])
    u, v, p, way = [0.0] * (n + 1), [0.0] * (m + 1), [0] * (m + 1), [0] * (m + 1)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = [math.inf] * (m + 1), [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = p[j0]
            for j in range(1, m + 1):
                if not used[j]:
                    cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
            delta, j1 = min((minv[j], j) for j in range(1, m + 1) if not used[j])
            for j in range(m + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    cols = [0] * n
    for j in range(1, m + 1):
        if p[j]:
            cols[p[j] - 1] = j - 1
    return cols


@torch.no_grad()
def match(logits, boxes, targets):
    prob = logits.flatten(0, 1).softmax(-1)
    out_box = boxes.flatten(0, 1)
    tgt_ids = torch.cat([t["labels"] for t in targets])
    tgt_box = torch.cat([t["boxes"] for t in targets])
    cost = 5 * torch.cdist(out_box, tgt_box, p=1) - prob[:, tgt_ids]
    cost = cost - 2 * generalized_box_iou(
        box_convert(out_box, "cxcywh", "xyxy"), box_convert(tgt_box, "cxcywh", "xyxy")
    )
    cost = cost.view(len(targets), NQ, -1).cpu()
    sizes = [len(t["boxes"]) for t in targets]
    result = []
    for i, c in enumerate(cost.split(sizes, -1)):
        cols = hungarian(c[i].T.tolist())
        result.append((torch.tensor(cols, dtype=torch.long), torch.arange(len(cols))))
    return result


empty_weight = torch.ones(NCLS + 1, device=device)
empty_weight[-1] = 0.1


def set_loss(logits, boxes, targets):
    idx = match(logits, boxes, targets)
    batch_idx = torch.cat([torch.full_like(q, i) for i, (q, _) in enumerate(idx)])
    query_idx = torch.cat([q for q, _ in idx])
    target_cls = torch.full(logits.shape[:2], NCLS, dtype=torch.long, device=logits.device)
    target_cls[batch_idx, query_idx] = torch.cat(
        [t["labels"][j] for t, (_, j) in zip(targets, idx, strict=True)]
    )
    loss_ce = F.cross_entropy(logits.transpose(1, 2), target_cls, empty_weight)
    src = boxes[batch_idx, query_idx]
    tgt = torch.cat([t["boxes"][j] for t, (_, j) in zip(targets, idx, strict=True)])
    n = max(len(tgt), 1)
    loss_l1 = F.l1_loss(src, tgt, reduction="sum") / n
    giou = generalized_box_iou(box_convert(src, "cxcywh", "xyxy"), box_convert(tgt, "cxcywh", "xyxy"))
    loss_giou = (1 - torch.diag(giou)).sum() / n
    return loss_ce + 5 * loss_l1 + 2 * loss_giou


def sample(n):
    images = torch.randn(n, 3, H, W, device=device)
    targets = []
    for _ in range(n):
        k = int(torch.randint(1, 13, ()).item())
        cxcy = torch.rand(k, 2) * 0.8 + 0.1
        wh = torch.rand(k, 2) * 0.15 + 0.02
        targets.append(
            {"boxes": torch.cat([cxcy, wh], 1).to(device), "labels": torch.randint(0, NCLS, (k,)).to(device)}
        )
    return images, targets


model = DETR().to(device)
trunk = [p for n, p in model.named_parameters() if n.startswith("backbone") and p.requires_grad]
rest = [p for n, p in model.named_parameters() if not n.startswith("backbone") and p.requires_grad]
opt = torch.optim.AdamW([{"params": rest}, {"params": trunk, "lr": 1e-5}], lr=1e-4, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    images, targets = sample(B)
    logits, boxes = model(images)
    loss = sum(set_loss(logits[k], boxes[k], targets) for k in range(LAYERS))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del images, targets, logits, boxes, loss
model.eval()
with torch.inference_mode():
    images, _ = sample(4)
    logits, boxes = model(images)
    scores, labels = logits[-1].softmax(-1)[..., :-1].max(-1)
    keep = scores > scores.median()
    xyxy = box_convert(boxes[-1], "cxcywh", "xyxy") * torch.tensor([W, H, W, H], device=device)
    kept = [xyxy[i][keep[i]] for i in range(len(images))]
if device == "cuda":
    print(
        f"eval {[len(k) for k in kept]} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
