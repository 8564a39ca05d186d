"""UPerNet (Xiao et al. 2018) semantic segmentation, ADE20K-sized (150 classes, ignore 255), on a
torchvision 0.26 Swin Transformer V2 tiny (`swin_v2_t(weights=None)`, window 8) turned into a multi-scale
backbone with torch.fx: `get_graph_node_names` lists the traced nodes and `create_feature_extractor`
returns the four stage outputs `features.1/3/5/7` (NHWC, 96-768 channels) that are permuted to NCHW.
The decode head is mmsegmentation's UPerHead written by hand with torchvision's `Conv2dNormActivation`:
a pyramid pooling module (scales 1, 2, 3, 6) on the last stage, lateral 1 x 1 and 3 x 3 FPN convs at 512
channels, the four levels upsampled to 1/4 and fused, a 1 x 1 classifier; an auxiliary FCN head on stage 3
(loss weight 0.4). AdamW with the torchvision references' `split_normalization_params` (no weight decay
on the norms), a `LinearLR` warmup then `PolynomialLR` via `SequentialLR`, bf16 autocast, 512 x 512 crops
at batch 4.

Phases: 0 backbone traced, heads and optimizer built; 1 first step; 2 three more; 3 eval under
inference_mode + bf16: multi-scale (0.75, 1.0, 1.25) and flip test-time augmentation of 2 images at 512 x
512, softmax scores accumulated at full resolution, a 150 x 150 confusion matrix by `bincount`."""

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names
from torchvision.ops._utils import split_normalization_params
from torchvision.ops.misc import Conv2dNormActivation

torch.manual_seed(3005)
dev = "cuda"
B, CROP, NUM_CLASSES, STEPS, CH = 4, 512, 150, 4, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class SwinBackbone(nn.Module):
    def __init__(self):
        super().__init__()
        swin = torchvision.models.swin_v2_t(weights=None)
        train_nodes, _ = get_graph_node_names(swin)
        nodes = {"features.1": "c2", "features.3": "c3", "features.5": "c4", "features.7": "c5"}
        assert all(any(t.startswith(n + ".") for t in train_nodes) for n in nodes)
        self.body = create_feature_extractor(swin, return_nodes=nodes)
        self.channels = [96, 192, 384, 768]

    def forward(self, x):
        return [f.permute(0, 3, 1, 2).contiguous() for f in self.body(x).values()]


class UPerHead(nn.Module):
    def __init__(self, in_channels, ch, num_classes, pool_scales=(1, 2, 3, 6)):
        super().__init__()
        self.ppm = nn.ModuleList(
            [
                nn.Sequential(nn.AdaptiveAvgPool2d(s), Conv2dNormActivation(in_channels[-1], ch, 1))
                for s in pool_scales
            ]
        )
        self.bottleneck = Conv2dNormActivation(in_channels[-1] + len(pool_scales) * ch, ch, 3)
        self.lateral = nn.ModuleList([Conv2dNormActivation(c, ch, 1) for c in in_channels[:-1]])
        self.fpn = nn.ModuleList([Conv2dNormActivation(ch, ch, 3) for _ in in_channels[:-1]])
        self.fuse = Conv2dNormActivation(len(in_channels) * ch, ch, 3)
        self.cls = nn.Sequential(nn.Dropout2d(0.1), nn.Conv2d(ch, num_classes, 1))

    def forward(self, feats):
        top = feats[-1]
        pooled = [
            F.interpolate(p(top), size=top.shape[2:], mode="bilinear", align_corners=False) for p in self.ppm
        ]
        laterals = [lat(f) for lat, f in zip(self.lateral, feats[:-1])] + [
            self.bottleneck(torch.cat([top, *pooled], 1))
        ]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(
                laterals[i], size=laterals[i - 1].shape[2:], mode="bilinear", align_corners=False
            )
        outs = [fpn(lat) for fpn, lat in zip(self.fpn, laterals[:-1])] + [laterals[-1]]
        size = outs[0].shape[2:]
        outs = [outs[0]] + [
            F.interpolate(o, size=size, mode="bilinear", align_corners=False) for o in outs[1:]
        ]
        return self.cls(self.fuse(torch.cat(outs, 1)))


class UPerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = SwinBackbone()
        self.decode = UPerHead(self.backbone.channels, CH, NUM_CLASSES)
        self.aux = nn.Sequential(
            Conv2dNormActivation(self.backbone.channels[2], 256, 3),
            nn.Dropout2d(0.1),
            nn.Conv2d(256, NUM_CLASSES, 1),
        )

    def forward(self, x):
        feats = self.backbone(x)
        out = F.interpolate(self.decode(feats), size=x.shape[2:], mode="bilinear", align_corners=False)
        if not self.training:
            return out
        aux = F.interpolate(self.aux(feats[2]), size=x.shape[2:], mode="bilinear", align_corners=False)
        return out, aux


model = UPerNet().to(dev)
norm_params, other_params = split_normalization_params(model)
optimizer = torch.optim.AdamW(
    [{"params": norm_params, "weight_decay": 0.0}, {"params": other_params, "weight_decay": 0.01}], lr=6e-5
)
scheduler = torch.optim.lr_scheduler.SequentialLR(
    optimizer,
    [
        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1e-6, total_iters=2),
        torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=STEPS, power=1.0),
    ],
    milestones=[2],
)
MEAN = torch.tensor([123.675, 116.28, 103.53], device=dev).view(1, 3, 1, 1)
STD = torch.tensor([58.395, 57.12, 57.375], device=dev).view(1, 3, 1, 1)
report("swin_v2_t_fx_upernet_build")


def batch(n):
    img = (torch.randint(0, 256, (n, 3, CROP, CROP), device=dev).float() - MEAN) / STD
    mask = torch.randint(0, NUM_CLASSES, (n, CROP, CROP), device=dev)
    mask[:, :, -32:] = 255
    return img, mask


model.train()
for step in range(STEPS):
    img, mask = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, aux = model(img)
        loss = F.cross_entropy(out.float(), mask, ignore_index=255) + 0.4 * F.cross_entropy(
            aux.float(), mask, ignore_index=255
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    if step == 0:
        print("first loss", round(loss.item(), 4))
        report("upernet_first_step_bf16")
print("loss", round(loss.item(), 4))
report("upernet_three_more_steps")

del img, mask, out, aux, loss
model.eval()
confusion = torch.zeros(NUM_CLASSES * NUM_CLASSES, dtype=torch.long, device=dev)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    img, mask = batch(2)
    scores = torch.zeros(2, NUM_CLASSES, CROP, CROP, device=dev)
    for scale in (0.75, 1.0, 1.25):
        x = F.interpolate(img, scale_factor=scale, mode="bilinear", align_corners=False)
        for flip in (False, True):
            xi = torch.flip(x, dims=[3]) if flip else x
            logits = model(xi)
            if flip:
                logits = torch.flip(logits, dims=[3])
            scores += F.interpolate(
                logits.float(), size=(CROP, CROP), mode="bilinear", align_corners=False
            ).softmax(1)
    pred = scores.argmax(1)
    valid = mask != 255
    confusion += torch.bincount(mask[valid] * NUM_CLASSES + pred[valid], minlength=NUM_CLASSES * NUM_CLASSES)
print("pixels", int(confusion.sum()))
report("multi_scale_flip_tta_confusion")
