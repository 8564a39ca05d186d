"""OpenPose (Cao et al. 2017) by hand, then a dense-prediction head from Hugging Face.

OpenPose: the first ten conv layers of a torchvision VGG-19 (random init, stride 8) and two 3x3 convs to 128
channels; stage 1 has two branches (part affinity fields, 38 channels = 19 limbs x 2, and 19 confidence
maps) of three 3x3 convs, a 1x1 conv of 512 and a 1x1 output; stages 2 and 3 take the features concatenated
with both previous outputs (185 channels) through five 7x7 convs of 128, a 1x1 of 128 and the output. Every
stage is supervised (masked MSE on PAFs and heatmaps), as in the paper.

Phases: 3 steps at batch 16 on 368 x 368 images in fp32 with SGD nesterov; a no_grad multi-scale evaluation
at batch 8 (scales 0.5, 1, 1.5 of the input by bilinear interpolation, the outputs resized bicubically to
the 1x scale and averaged, then 3x3 max-pool NMS and the top 8 peaks per joint; every candidate pair of
each limb scored by the PAF line integral: 10 points per segment sampled by F.grid_sample and dotted with
the segment's unit vector); then a Hugging Face DPTForDepthEstimation from DPTConfig (ViT-B/16 backbone,
random init) trained 3 steps at batch 8 on 384 x 384 with a scale-and-shift-invariant loss (per-image least
squares alignment in closed form) plus a gradient-matching term, under bf16 autocast with fused AdamW and
gradient_checkpointing_enable(); then empty_cache() and a no_grad bf16 evaluation at 512 x 512 (the
position embedding resized by the model). 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from transformers import DPTConfig, DPTForDepthEstimation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2206)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, DPT_BATCH = (2, 1, 1) if SMALL else (16, 8, 8)
RES, DPT_RES, DPT_HI = (96, 64, 96) if SMALL else (368, 384, 512)
LIMBS = [(1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10), (1, 11), (11, 12),
         (12, 13), (1, 0), (0, 14), (14, 16), (0, 15), (15, 17), (2, 16), (5, 17)]
PARTS, PEAKS, SAMPLES = 19, 8, 10


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def conv(cin, cout, k, relu=True):
    layers = [nn.Conv2d(cin, cout, k, padding=k // 2)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return layers


def stage1_branch(cout):
    return nn.Sequential(*conv(128, 128, 3), *conv(128, 128, 3), *conv(128, 128, 3), *conv(128, 512, 1),
                         *conv(512, cout, 1, relu=False))


def stage_t_branch(cout):
    layers = conv(128 + 38 + PARTS, 128, 7)
    for _ in range(4):
        layers += conv(128, 128, 7)
    return nn.Sequential(*layers, *conv(128, 128, 1), *conv(128, cout, 1, relu=False))


class OpenPose(nn.Module):
    def __init__(self, stages=3):
        super().__init__()
        vgg = torchvision.models.vgg19(weights=None).features[:23]
        self.features = nn.Sequential(*vgg, *conv(512, 256, 3), *conv(256, 128, 3))
        self.paf = nn.ModuleList([stage1_branch(38)] + [stage_t_branch(38) for _ in range(stages - 1)])
        self.heat = nn.ModuleList([stage1_branch(PARTS)] + [stage_t_branch(PARTS) for _ in range(stages - 1)])

    def forward(self, x):
        f = self.features(x)
        outs = []
        inp = f
        for paf, heat in zip(self.paf, self.heat):
            p, h = paf(inp), heat(inp)
            outs.append((p, h))
            inp = torch.cat([f, p, h], 1)
        return outs


def paf_scores(paf, peaks_xy, h, w):
    # paf: (N, 38, H, W); peaks_xy: (N, PARTS, PEAKS, 2) in pixels. Returns (N, limbs, PEAKS, PEAKS).
    n = paf.shape[0]
    scores = []
    t = torch.linspace(0, 1, SAMPLES, device=paf.device)
    for li, (a, b) in enumerate(LIMBS):
        pa = peaks_xy[:, a, :, None, None, :]
        pb = peaks_xy[:, b, None, :, None, :]
        pts = pa + (pb - pa) * t.view(1, 1, 1, SAMPLES, 1)
        vec = pb - pa
        unit = vec / vec.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        grid = torch.stack([(2 * pts[..., 0] + 1) / w - 1, (2 * pts[..., 1] + 1) / h - 1], -1)
        grid = grid.view(n, PEAKS * PEAKS, SAMPLES, 2)
        field = F.grid_sample(paf[:, 2 * li: 2 * li + 2], grid, mode="bilinear", align_corners=False)
        field = field.view(n, 2, PEAKS, PEAKS, SAMPLES).permute(0, 2, 3, 4, 1)
        scores.append((field * unit).sum(-1).mean(-1))
    return torch.stack(scores, 1)


model = OpenPose().to(device)
print(f"openpose params {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, nesterov=True, weight_decay=5e-4)
fh = RES // 8
for it in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    paf_t = torch.randn(BATCH, 38, fh, fh, device=device).tanh()
    heat_t = torch.rand(BATCH, PARTS, fh, fh, device=device)
    mask = (torch.rand(BATCH, 1, fh, fh, device=device) > 0.05).float()
    loss = 0
    for p, h in model(x):
        loss = loss + ((p - paf_t) ** 2 * mask).sum() / BATCH + ((h - heat_t) ** 2 * mask).sum() / BATCH
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"openpose fp32 loss {loss.item():.2f}")
report("openpose fp32 sgd nesterov")

model.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, 3, RES, RES, device=device)
    paf_avg = torch.zeros(EVAL_BATCH, 38, fh, fh, device=device)
    heat_avg = torch.zeros(EVAL_BATCH, PARTS, fh, fh, device=device)
    for scale in (0.5, 1.0, 1.5):
        xs = F.interpolate(x, scale_factor=scale, mode="bilinear", align_corners=False)
        p, h = model(xs)[-1]
        paf_avg += F.interpolate(p, size=(fh, fh), mode="bicubic", align_corners=False) / 3
        heat_avg += F.interpolate(h, size=(fh, fh), mode="bicubic", align_corners=False) / 3
        del p, h, xs
    peaks = heat_avg * (F.max_pool2d(heat_avg, 3, 1, 1) == heat_avg).float()
    vals, idx = peaks.flatten(2).topk(PEAKS, dim=2)
    peaks_xy = torch.stack([(idx % fh).float(), (idx // fh).float()], -1)
    limb_scores = paf_scores(paf_avg, peaks_xy, fh, fh)
print(f"paf limb scores {tuple(limb_scores.shape)} mean {limb_scores.mean().item():.4f}")
report("multiscale paf line integral eval")

del model, opt, paf_avg, heat_avg, peaks
config = DPTConfig(image_size=DPT_RES, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, neck_hidden_sizes=[96, 192, 384, 768], fusion_hidden_size=256)
dpt = DPTForDepthEstimation(config).to(device)
dpt.gradient_checkpointing_enable()
dpt.train()
print(f"dpt params {sum(p.numel() for p in dpt.parameters()) / 1e6:.1f} M")
opt = torch.optim.AdamW(dpt.parameters(), lr=5e-5, weight_decay=0.01, fused=device == "cuda")


def ssi_loss(pred, target, mask):
    # MiDaS: align pred to target per image by least squares (scale s, shift t), then masked MSE,
    # plus a gradient-matching term on the aligned residual
    m = mask.flatten(1)
    p, t = pred.flatten(1), target.flatten(1)
    a00 = (m * p * p).sum(1)
    a01 = (m * p).sum(1)
    a11 = m.sum(1)
    b0 = (m * p * t).sum(1)
    b1 = (m * t).sum(1)
    det = (a00 * a11 - a01 * a01).clamp(min=1e-6)
    s = (a11 * b0 - a01 * b1) / det
    sh = (-a01 * b0 + a00 * b1) / det
    res = (s[:, None, None] * pred + sh[:, None, None] - target) * mask
    data = (res**2).sum() / mask.sum()
    gx = (res[:, :, 1:] - res[:, :, :-1]).abs() * mask[:, :, 1:] * mask[:, :, :-1]
    gy = (res[:, 1:] - res[:, :-1]).abs() * mask[:, 1:] * mask[:, :-1]
    return data + 0.5 * (gx.sum() + gy.sum()) / mask.sum()


for it in range(3):
    x = torch.randn(DPT_BATCH, 3, DPT_RES, DPT_RES, device=device)
    depth = torch.rand(DPT_BATCH, DPT_RES, DPT_RES, device=device) * 10 + 0.5
    mask = (torch.rand(DPT_BATCH, DPT_RES, DPT_RES, device=device) > 0.1).float()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = dpt(pixel_values=x).predicted_depth
    loss = ssi_loss(pred.float(), 1.0 / depth, mask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del pred
print(f"dpt ssi loss {loss.item():.4f}")
report("hf dpt depth bf16 fused adamw checkpointing")

del opt, x, depth, mask
if device == "cuda":
    torch.cuda.empty_cache()
dpt.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(DPT_BATCH, 3, DPT_HI, DPT_HI, device=device)
    pred = dpt(pixel_values=x).predicted_depth
print(f"dpt 512 depth {tuple(pred.shape)} mean {pred.float().mean().item():.4f}")
report("empty_cache dpt 512 eval")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
