"""DETR-style set prediction by hand: a torchvision ResNet-50 backbone (random init, frozen BN as
torchvision.ops.FrozenBatchNorm2d), a 1x1 projection to 256, sine-free learned positional embeddings,
nn.Transformer (6 encoder + 6 decoder layers, d_model 256, 8 heads, ffn 2048, batch_first), 100 object
queries, class (91 + no-object) and box (3-layer MLP, sigmoid cxcywh) heads on every decoder layer.

Matching is a greedy stand-in for the Hungarian algorithm: a cost matrix [B, 100, T] (class prob, L1,
-GIoU) with a fixed number T=8 of targets per image; for each target in turn the argmin query is taken
and its row set to +inf, so every size is fixed. Losses: CE with no-object weight 0.1, L1 and
torchvision.ops.generalized_box_iou_loss on matched pairs, summed over the 6 decoder layers (aux losses).

AdamW (lr 1e-4, backbone 1e-5), grad clip 0.1. Phases: 3 steps under bf16 autocast at batch 8 on
512 x 512; no_grad evaluation at batch 16 (top-100 scores); 3 steps in fp16 autocast with a GradScaler;
empty_cache() then inference_mode at batch 4 on 800 x 800. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import box_convert, generalized_box_iou, generalized_box_iou_loss

torch.manual_seed(2241)
device = "cuda"
NUM_CLASSES, QUERIES, T = 91, 100, 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class MLP(nn.Module):
    def __init__(self, d, out, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d if i < layers - 1 else out) for i in range(layers))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class Detr(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        r = torchvision.models.resnet50(weights=None, norm_layer=torchvision.ops.FrozenBatchNorm2d)
        self.backbone = nn.Sequential(*list(r.children())[:-2])
        self.proj = nn.Conv2d(2048, d, 1)
        self.row = nn.Parameter(torch.randn(64, d // 2) * 0.02)
        self.col = nn.Parameter(torch.randn(64, d // 2) * 0.02)
        self.query = nn.Parameter(torch.randn(QUERIES, d))
        self.transformer = nn.Transformer(d, 8, 6, 6, 2048, 0.1, batch_first=True, norm_first=False)
        self.cls = nn.Linear(d, NUM_CLASSES + 1)
        self.box = MLP(d, 4)

    def forward(self, x):
        f = self.proj(self.backbone(x))
        b, d, h, w = f.shape
        pos = torch.cat([self.col[:w].unsqueeze(0).expand(h, -1, -1), self.row[:h].unsqueeze(1).expand(-1, w, -1)], -1)
        src = f.flatten(2).transpose(1, 2) + pos.flatten(0, 1).unsqueeze(0)
        memory = self.transformer.encoder(src)
        tgt = self.query.unsqueeze(0).expand(b, -1, -1)
        outs = []
        out = torch.zeros_like(tgt)
        for layer in self.transformer.decoder.layers:
            out = layer(out + tgt, memory)
            outs.append(self.transformer.decoder.norm(out))
        hs = torch.stack(outs)
        return self.cls(hs), self.box(hs).sigmoid()


def greedy_match(logits, boxes, tgt_cls, tgt_box):
    with torch.no_grad():
        prob = logits.float().softmax(-1)
        b = prob.shape[0]
        c_cls = -prob.gather(2, tgt_cls.unsqueeze(1).expand(-1, QUERIES, -1))
        c_l1 = torch.cdist(boxes.float(), tgt_box, p=1)
        xy = box_convert(boxes.float(), "cxcywh", "xyxy")
        txy = box_convert(tgt_box, "cxcywh", "xyxy")
        c_giou = -torch.stack([generalized_box_iou(xy[i], txy[i]) for i in range(b)])
        cost = c_cls + 5 * c_l1 + 2 * c_giou
        idx = []
        ar = torch.arange(b, device=cost.device)
        for t in range(T):
            q = cost[:, :, t].argmin(1)
            idx.append(q)
            cost[ar, q, :] = float("inf")
        return torch.stack(idx, 1)


def losses(logits_all, boxes_all, tgt_cls, tgt_box):
    total = 0.0
    weight = torch.ones(NUM_CLASSES + 1, device=device)
    weight[-1] = 0.1
    for logits, boxes in zip(logits_all, boxes_all):
        q = greedy_match(logits, boxes, tgt_cls, tgt_box)
        target = torch.full(logits.shape[:2], NUM_CLASSES, device=device, dtype=torch.long)
        target.scatter_(1, q, tgt_cls)
        ce = F.cross_entropy(logits.float().transpose(1, 2), target, weight)
        mb = boxes.float().gather(1, q.unsqueeze(-1).expand(-1, -1, 4))
        l1 = F.l1_loss(mb, tgt_box)
        giou = generalized_box_iou_loss(box_convert(mb, "cxcywh", "xyxy"), box_convert(tgt_box, "cxcywh", "xyxy"),
                                        reduction="mean")
        total = total + ce + 5 * l1 + 2 * giou
    return total


def targets(b):
    cls = torch.randint(0, NUM_CLASSES, (b, T), device=device)
    cxcy = torch.rand(b, T, 2, device=device) * 0.6 + 0.2
    wh = torch.rand(b, T, 2, device=device) * 0.3 + 0.05
    return cls, torch.cat([cxcy, wh], -1)


model = Detr().to(device)
back = [p for n, p in model.named_parameters() if n.startswith("backbone") and p.requires_grad]
rest = [p for n, p in model.named_parameters() if not n.startswith("backbone")]
opt = torch.optim.AdamW([{"params": back, "lr": 1e-5}, {"params": rest}], lr=1e-4, weight_decay=1e-4)


def train(steps, dtype, scaler=None, batch=8, res=512):
    model.train()
    for _ in range(steps):
        x = torch.randn(batch, 3, res, res, device=device)
        tc, tb = targets(batch)
        with torch.autocast("cuda", dtype=dtype):
            logits, boxes = model(x)
        loss = losses(logits, boxes, tc, tb)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            scaler.step(opt)
            scaler.update()
        print(f"loss {loss.item():.4f}")


train(3, torch.bfloat16)
report("bf16 train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    logits, boxes = model(torch.randn(16, 3, 512, 512, device=device))
    scores, labels = logits[-1].float().softmax(-1)[..., :-1].max(-1)
    top, idx = scores.topk(100, dim=1)
    kept = boxes[-1].gather(1, idx.unsqueeze(-1).expand(-1, -1, 4))
print("eval mean score", top.mean().item(), kept.shape)
del logits, boxes, scores, labels, top, idx, kept
report("no_grad eval")

train(3, torch.float16, scaler=torch.amp.GradScaler("cuda"))
report("fp16 gradscaler train")

opt.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
model.eval()
with torch.inference_mode():
    logits, boxes = model(torch.randn(4, 3, 800, 800, device=device))
print("inference", logits.shape, boxes.shape)
report("inference 800")
