"""The second stage of a Mask R-CNN written by hand over a torchvision ResNet-50 FPN backbone
(torchvision.models.detection.backbone_utils.resnet_fpn_backbone, weights=None, trainable_layers=3,
FrozenBatchNorm2d), with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.

Proposals are fixed: 512 random boxes per image (jittered copies of the 8 ground-truth boxes plus uniform
random boxes), so every size is fixed. torchvision.ops.MultiScaleRoIAlign pools 7x7 features for the box
head (TwoMLPHead 1024 + FastRCNNPredictor, 91 classes) and 14x14 features for the mask head (4 conv3x3 +
ReLU, ConvTranspose2d 2x2 stride 2, 1x1 to 91 masks of 28x28). Labels come from torchvision.ops.box_iou
argmax (IoU >= 0.5 foreground, else background), box regression is smooth L1 on the class's deltas, mask
loss BCE-with-logits on the target class's channel against masks cut by roi_align from random full-image
masks (gathered with torch.gather, no boolean indexing).

Phases: 3 SGD (momentum 0.9) steps in fp32 at batch 8 on 800 x 800; inference_mode evaluation at batch 8
(softmax scores, decoded boxes for every class, mask probabilities for the argmax class); 3 steps under fp16
autocast with a GradScaler at batch 16. 3 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone  # noqa: E402
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead  # noqa: E402
from torchvision.ops import MultiScaleRoIAlign, box_iou, roi_align  # noqa: E402

torch.manual_seed(2246)
device = "cuda"
NC, G, P, RES = 91, 8, 512, 800


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class MaskRCNNStage2(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=3)
        names = ["0", "1", "2", "3"]
        self.box_pool = MultiScaleRoIAlign(names, 7, 2)
        self.mask_pool = MultiScaleRoIAlign(names, 14, 2)
        self.box_head = TwoMLPHead(256 * 7 * 7, 1024)
        self.box_pred = FastRCNNPredictor(1024, NC)
        layers = []
        for _ in range(4):
            layers += [nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True)]
        self.mask_head = nn.Sequential(*layers, nn.ConvTranspose2d(256, 256, 2, 2), nn.ReLU(inplace=True),
                                       nn.Conv2d(256, NC, 1))

    def forward(self, x, proposals):
        feats = self.backbone(x)
        sizes = [(x.shape[-2], x.shape[-1])] * x.shape[0]
        bf = self.box_head(self.box_pool(feats, proposals, sizes))
        logits, deltas = self.box_pred(bf)
        masks = self.mask_head(self.mask_pool(feats, proposals, sizes))
        return logits, deltas, masks


def make_batch(b):
    x = torch.randn(b, 3, RES, RES, device=device)
    xy = torch.rand(b, G, 2, device=device) * RES * 0.6
    gt = torch.cat([xy, xy + torch.rand(b, G, 2, device=device) * RES * 0.35 + 24], -1)
    labels = torch.randint(1, NC, (b, G), device=device)
    jit = gt.repeat(1, 32, 1) + torch.randn(b, 32 * G, 4, device=device) * 16
    rxy = torch.rand(b, P - 32 * G, 2, device=device) * RES * 0.8
    rnd = torch.cat([rxy, rxy + torch.rand(b, P - 32 * G, 2, device=device) * 150 + 8], -1)
    props = torch.cat([jit, rnd], 1).clamp(0, RES)
    x1y1 = torch.min(props[..., :2], props[..., 2:])
    props = torch.cat([x1y1, torch.max(props[..., 2:], x1y1 + 1)], -1)
    gt_masks = (torch.rand(b, 1, RES // 4, RES // 4, device=device) > 0.5).float()
    return x, gt, labels, props, gt_masks


def encode(p, g):
    pw, ph = p[:, 2] - p[:, 0], p[:, 3] - p[:, 1]
    gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    return torch.stack([10 * ((g[:, 0] + gw / 2) - (p[:, 0] + pw / 2)) / pw,
                        10 * ((g[:, 1] + gh / 2) - (p[:, 1] + ph / 2)) / ph,
                        5 * torch.log(gw / pw), 5 * torch.log(gh / ph)], 1)


def loss_fn(logits, deltas, masks, gt, labels, props, gt_masks):
    b = gt.shape[0]
    iou = torch.stack([box_iou(props[i], gt[i]) for i in range(b)])
    best, arg = iou.max(-1)
    fg = (best >= 0.5).flatten().float()
    cls_t = (labels.gather(1, arg) * (best >= 0.5)).flatten()
    l_cls = F.cross_entropy(logits.float(), cls_t)
    flat_p = props.reshape(-1, 4)
    matched = gt.gather(1, arg[..., None].expand(-1, -1, 4)).reshape(-1, 4)
    d = deltas.float().view(-1, NC, 4).gather(1, cls_t.view(-1, 1, 1).expand(-1, 1, 4)).squeeze(1)
    l_box = (F.smooth_l1_loss(d, encode(flat_p, matched), beta=1 / 9, reduction="none").sum(1) * fg).sum() / (
        fg.numel())
    rois = torch.cat([torch.arange(b, device=device).repeat_interleave(P)[:, None].float(), flat_p], 1)
    mt = roi_align(gt_masks, rois, 28, spatial_scale=0.25, sampling_ratio=2, aligned=True)[:, 0]
    ml = masks.float().gather(1, cls_t.view(-1, 1, 1, 1).expand(-1, 1, 28, 28))[:, 0]
    l_mask = (F.binary_cross_entropy_with_logits(ml, (mt > 0.5).float(), reduction="none").mean((1, 2)) * fg).sum() / (
        fg.sum().clamp(min=1))
    return l_cls + l_box + l_mask


model = MaskRCNNStage2().to(device)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.02, momentum=0.9, weight_decay=1e-4)


def train(steps, b, scaler=None):
    model.train()
    for _ in range(steps):
        x, gt, labels, props, gt_masks = make_batch(b)
        with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
            logits, deltas, masks = model(x, list(props.unbind(0)))
        loss = loss_fn(logits, deltas, masks, gt, labels, props, gt_masks)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        print(f"loss {loss.item():.4f}")


train(3, 8)
report("fp32 train")

model.eval()
with torch.inference_mode():
    x, gt, labels, props, gt_masks = make_batch(8)
    logits, deltas, masks = model(x, list(props.unbind(0)))
    scores = logits.softmax(-1)
    d = deltas.view(-1, NC, 4)
    p = props.reshape(-1, 1, 4)
    w, h = (p[..., 2] - p[..., 0]), (p[..., 3] - p[..., 1])
    cx, cy = p[..., 0] + w / 2 + d[..., 0] / 10 * w, p[..., 1] + h / 2 + d[..., 1] / 10 * h
    bw, bh = w * (d[..., 2] / 5).exp(), h * (d[..., 3] / 5).exp()
    boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], -1).clamp(0, RES)
    lab = scores[:, 1:].argmax(1) + 1
    mprob = masks.gather(1, lab.view(-1, 1, 1, 1).expand(-1, 1, 28, 28)).sigmoid()
print("eval", tuple(boxes.shape), tuple(mprob.shape), scores.max().item())
del logits, deltas, masks, scores, d, p, boxes, mprob, x, gt_masks
report("inference_mode eval")

train(3, 16, torch.amp.GradScaler("cuda"))
report("fp16 gradscaler train")
