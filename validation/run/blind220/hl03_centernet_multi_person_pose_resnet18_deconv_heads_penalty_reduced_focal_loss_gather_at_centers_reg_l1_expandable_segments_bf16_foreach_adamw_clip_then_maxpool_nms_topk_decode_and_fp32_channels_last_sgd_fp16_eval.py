"""CenterNet (Zhou et al. 2019, "Objects as Points") for multi-person pose: a torchvision ResNet-18 (random
init) to stride 32, three ConvTranspose2d(4, 2, 1) + BN + ReLU up-sampling layers (256, 128, 64 channels) to
stride 4, and heads of 3x3 conv (256) + ReLU + 1x1 conv: person center heatmap (1), box size (2), center
offset (2), joint offsets from the center (34), joint heatmaps (17) and joint sub-pixel offsets (2).
Ground truth by hand on the GPU: Gaussian peaks at 32 random centers per image (max over objects), the peak
cells set to exactly 1 by scatter; the losses are CenterNet's penalty-reduced focal loss on the heatmaps and
masked L1 losses on the regression heads gathered at the center indices (permute + view + gather, as
_transpose_and_gather_feat does).

PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set before torch is imported. Phases: 3 steps at batch
24 on 512 x 512 images under bf16 autocast with foreach AdamW and clip_grad_norm_; a no_grad decode at batch
32 (sigmoid, 3x3 max-pool NMS, top-100 over the flattened heatmap, gathered sizes, offsets and joints); the
model in channels_last trained 3 steps in fp32 with SGD momentum at 384 x 384 and batch 32; then
empty_cache() and a half-precision inference at 768 x 768, batch 8. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2203)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, SGD_BATCH, BIG_BATCH = (2, 2, 2, 1) if SMALL else (24, 32, 32, 8)
RES, SGD_RES, BIG_RES = (128, 128, 128) if SMALL else (512, 384, 768)
OBJECTS, TOPK, JOINTS = 32, 100, 17


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class CenterNetPose(nn.Module):
    HEADS = {"hm": 1, "wh": 2, "reg": 2, "hps": 2 * JOINTS, "hm_hp": JOINTS, "hp_offset": 2}

    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        self.backbone = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3, r.layer4)
        layers, cin = [], 512
        for cout in (256, 128, 64):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            cin = cout
        self.deconv = nn.Sequential(*layers)
        self.heads = nn.ModuleDict()
        for name, c in self.HEADS.items():
            head = nn.Sequential(nn.Conv2d(64, 256, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(256, c, 1))
            if name in ("hm", "hm_hp"):
                head[-1].bias.data.fill_(-2.19)
            self.heads[name] = head

    def forward(self, x):
        f = self.deconv(self.backbone(x))
        return {name: head(f) for name, head in self.heads.items()}


def gather_feat(feat, ind):
    # CenterNet's _transpose_and_gather_feat
    n, c = feat.shape[:2]
    feat = feat.permute(0, 2, 3, 1).contiguous().view(n, -1, c)
    return feat.gather(1, ind.unsqueeze(2).expand(n, ind.size(1), c))


def focal_loss(pred, gt):
    pred = pred.float().sigmoid().clamp(1e-4, 1 - 1e-4)
    pos = gt.eq(1).float()
    neg = 1 - pos
    neg_weights = torch.pow(1 - gt, 4)
    pos_loss = (torch.log(pred) * torch.pow(1 - pred, 2) * pos).sum()
    neg_loss = (torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg).sum()
    num_pos = pos.sum().clamp(min=1)
    return -(pos_loss + neg_loss) / num_pos


def reg_l1(output, mask, ind, target):
    pred = gather_feat(output.float(), ind)
    m = mask.unsqueeze(2).expand_as(pred).float()
    return F.l1_loss(pred * m, target * m, reduction="sum") / (m.sum() + 1e-4)


def gaussian_maps(centers, h, w, sigma):
    ys = torch.arange(h, device=device, dtype=torch.float32).view(1, 1, h, 1)
    xs = torch.arange(w, device=device, dtype=torch.float32).view(1, 1, 1, w)
    d2 = (xs - centers[..., 0, None, None]) ** 2 + (ys - centers[..., 1, None, None]) ** 2
    return torch.exp(-d2 / (2 * sigma[..., None, None] ** 2))


def make_targets(n, res):
    h = w = res // 4
    centers = torch.rand(n, OBJECTS, 2, device=device) * (w - 1)
    ind_xy = centers.long()
    ind = ind_xy[..., 1] * w + ind_xy[..., 0]
    sigma = torch.rand(n, OBJECTS, device=device) * 3 + 1
    hm = gaussian_maps(centers, h, w, sigma).amax(1, keepdim=True)
    hm.view(n, 1, -1).scatter_(2, ind.unsqueeze(1), 1.0)
    joints = centers.unsqueeze(2) + torch.randn(n, OBJECTS, JOINTS, 2, device=device) * 4
    joints = joints.clamp(0, w - 1)
    jh = []
    for j in range(JOINTS):
        jh.append(gaussian_maps(joints[:, :, j], h, w, sigma).amax(1))
    hm_hp = torch.stack(jh, 1)
    mask = (torch.rand(n, OBJECTS, device=device) > 0.3).float()
    return {
        "hm": hm,
        "hm_hp": hm_hp,
        "ind": ind,
        "mask": mask,
        "wh": torch.rand(n, OBJECTS, 2, device=device) * 40,
        "reg": centers - ind_xy.float(),
        "hps": (joints - centers.unsqueeze(2)).reshape(n, OBJECTS, 2 * JOINTS),
        "hp_offset": joints[:, :, 0] - joints[:, :, 0].floor(),
    }


def centernet_loss(out, t):
    loss = focal_loss(out["hm"], t["hm"]) + focal_loss(out["hm_hp"], t["hm_hp"])
    loss = loss + 0.1 * reg_l1(out["wh"], t["mask"], t["ind"], t["wh"])
    loss = loss + reg_l1(out["reg"], t["mask"], t["ind"], t["reg"])
    loss = loss + reg_l1(out["hps"], t["mask"], t["ind"], t["hps"])
    loss = loss + reg_l1(out["hp_offset"], t["mask"], t["ind"], t["hp_offset"])
    return loss


def decode(out, k=TOPK):
    heat = out["hm"].float().sigmoid()
    hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
    heat = heat * (hmax == heat).float()
    n, _, h, w = heat.shape
    scores, inds = torch.topk(heat.view(n, -1), k)
    ys, xs = (inds // w).float(), (inds % w).float()
    wh = gather_feat(out["wh"].float(), inds)
    reg = gather_feat(out["reg"].float(), inds)
    hps = gather_feat(out["hps"].float(), inds).view(n, k, JOINTS, 2)
    cx, cy = xs + reg[..., 0], ys + reg[..., 1]
    boxes = torch.stack([cx - wh[..., 0] / 2, cy - wh[..., 1] / 2, cx + wh[..., 0] / 2, cy + wh[..., 1] / 2], -1)
    kps = hps + torch.stack([cx, cy], -1).unsqueeze(2)
    return scores, boxes, kps


model = CenterNetPose().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-4)
for it in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    t = make_targets(BATCH, RES)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(x)
    loss = centernet_loss(out, t)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 35.0)
    opt.step()
    del out, t
print(f"bf16 loss {loss.item():.4f}")
report("centernet bf16 foreach adamw")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EVAL_BATCH, 3, RES, RES, device=device)
    scores, boxes, kps = decode(model(x))
print(f"decode top score {scores.max().item():.4f} boxes {tuple(boxes.shape)} kps {tuple(kps.shape)}")
report("maxpool nms topk decode")

model.train()
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
for it in range(3):
    x = torch.randn(SGD_BATCH, 3, SGD_RES, SGD_RES, device=device).contiguous(memory_format=torch.channels_last)
    t = make_targets(SGD_BATCH, SGD_RES)
    loss = centernet_loss(model(x), t)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del t
print(f"fp32 channels_last loss {loss.item():.4f}")
report("centernet fp32 channels_last sgd")

del opt, x, loss
if device == "cuda":
    torch.cuda.empty_cache()
model.eval().half()
with torch.no_grad():
    x = torch.randn(BIG_BATCH, 3, BIG_RES, BIG_RES, device=device, dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    scores, boxes, kps = decode(model(x))
print(f"768 decode score {scores.mean().item():.4f}")
report("empty_cache fp16 768 eval")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
