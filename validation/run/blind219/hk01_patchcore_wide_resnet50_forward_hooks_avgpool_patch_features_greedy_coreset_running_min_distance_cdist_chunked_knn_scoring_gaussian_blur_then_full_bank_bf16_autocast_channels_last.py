"""PatchCore (Roth et al. 2022) anomaly detection with a frozen torchvision wide_resnet50_2 (random init).

Forward hooks on layer2 and layer3 collect intermediate features; each map is smoothed by a 3x3 average pool
(the locally aware patch features), layer3 is upsampled bilinearly to layer2's 28 x 28 grid, the two are
concatenated (1536 channels) and every patch vector is reduced to 1024 dimensions by adaptive average
pooling over the channels. The memory bank holds every patch of the "good" training images.

Phases: the memory bank extracted under inference_mode from 256 images at batch 32 (fp32, 200,704 patches
of 1024); a 1 % coreset by greedy farthest-point selection on a random 128-dimensional projection with a
running minimum-distance vector (2,007 iterations); scoring 64 test images against the coreset by
torch.cdist in chunks of 8,192 patches with PatchCore's re-weighting (softmax over the distances of the
nearest coreset sample's own neighbourhood in the bank), the anomaly maps upsampled to 224 x 224 and
blurred by a depthwise 33 x 33 Gaussian conv2d; then the backbone in channels_last under bf16 autocast with
the bank kept in bf16 and k-NN against the full bank (no coreset) in query chunks of 8,192 x bank chunks of
50,176 with a running top-3 merge. 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2191)
device = "cuda" if torch.cuda.is_available() else "cpu"
N_TRAIN, N_TEST, BATCH, RES = (8, 4, 4, 64) if SMALL else (256, 64, 32, 224)
FEAT_DIM, PROJ_DIM, CORESET_FRAC = 1024, 128, 0.01
Q_CHUNK, B_CHUNK = (512, 1024) if SMALL else (8192, 50176)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


backbone = torchvision.models.wide_resnet50_2(weights=None).to(device).eval()
for p in backbone.parameters():
    p.requires_grad_(False)
features = {}


def hook(name):
    def fn(module, inputs, output):
        features[name] = output

    return fn


backbone.layer2.register_forward_hook(hook("layer2"))
backbone.layer3.register_forward_hook(hook("layer3"))


def patch_features(images):
    features.clear()
    backbone(images)
    f2 = F.avg_pool2d(features["layer2"], 3, 1, 1)
    f3 = F.avg_pool2d(features["layer3"], 3, 1, 1)
    f3 = F.interpolate(f3, size=f2.shape[-2:], mode="bilinear", align_corners=False)
    f = torch.cat([f2, f3], dim=1)  # B, 1536, 28, 28
    b, c, h, w = f.shape
    f = f.permute(0, 2, 3, 1).reshape(-1, 1, c)
    f = F.adaptive_avg_pool1d(f, FEAT_DIM).squeeze(1)  # B*h*w, 1024
    features.clear()
    return f, (h, w)


# 1. memory bank
with torch.inference_mode():
    bank = []
    for i in range(N_TRAIN // BATCH):
        x = torch.randn(BATCH, 3, RES, RES, device=device)
        f, grid = patch_features(x)
        bank.append(f)
    bank = torch.cat(bank)
print(f"memory bank {tuple(bank.shape)} grid {grid}")
report("memory bank fp32")

# 2. greedy coreset (farthest point) on a random projection
with torch.inference_mode():
    proj = torch.randn(FEAT_DIM, PROJ_DIM, device=device) / math.sqrt(PROJ_DIM)
    reduced = bank @ proj
    n_select = max(1, int(bank.shape[0] * CORESET_FRAC))
    idx = torch.randint(0, bank.shape[0], (1,), device=device)
    min_dist = torch.linalg.norm(reduced - reduced[idx], dim=1, keepdim=True)
    selected = [idx]
    for _ in range(n_select - 1):
        idx = torch.argmax(min_dist).view(1)
        selected.append(idx)
        d = torch.linalg.norm(reduced - reduced[idx], dim=1, keepdim=True)
        min_dist = torch.minimum(min_dist, d)
    coreset_idx = torch.cat(selected)
    coreset = bank[coreset_idx].contiguous()
    del reduced, min_dist, proj
print(f"coreset {tuple(coreset.shape)}")
report("greedy coreset")

# 3. scoring against the coreset, re-weighting, anomaly maps
sigma = 4
ks = 2 * int(4 * sigma + 0.5) + 1
t = torch.arange(ks, device=device, dtype=torch.float32) - ks // 2
g1 = torch.exp(-(t**2) / (2 * sigma**2))
g1 = g1 / g1.sum()
gauss = (g1[:, None] * g1[None, :]).view(1, 1, ks, ks)
with torch.inference_mode():
    maps, image_scores = [], []
    for i in range(N_TEST // BATCH):
        x = torch.randn(BATCH, 3, RES, RES, device=device)
        f, (h, w) = patch_features(x)
        dists, nn_idx = [], []
        for q in f.split(Q_CHUNK):
            d = torch.cdist(q, coreset)
            v, j = d.min(dim=1)
            dists.append(v)
            nn_idx.append(j)
        dists = torch.cat(dists).view(BATCH, h * w)
        nn_idx = torch.cat(nn_idx).view(BATCH, h * w)
        # re-weighting by the nearest coreset sample's 9 neighbours in the coreset
        worst = dists.argmax(dim=1)
        worst_patch = f.view(BATCH, h * w, -1)[torch.arange(BATCH, device=device), worst]
        m_star = coreset[nn_idx[torch.arange(BATCH, device=device), worst]]
        nb = torch.cdist(m_star, coreset).topk(min(9, coreset.shape[0]), largest=False).indices
        nb_dist = torch.linalg.norm(worst_patch[:, None, :] - coreset[nb], dim=2)
        weight = 1 - torch.softmax(nb_dist, dim=1)[:, 0]
        image_scores.append(weight * dists.max(dim=1).values)
        amap = F.interpolate(
            dists.view(BATCH, 1, h, w), size=(RES, RES), mode="bilinear", align_corners=False
        )
        amap = F.conv2d(F.pad(amap, (ks // 2,) * 4, mode="reflect"), gauss)
        maps.append(amap.cpu())
    image_scores = torch.cat(image_scores)
print(f"image scores mean {image_scores.mean().item():.4f} map {tuple(maps[0].shape)}")
report("coreset scoring")

# 4. bf16 autocast, channels_last backbone, full bank in bf16, chunked k-NN with a running top-3 merge
del coreset, maps
bank16 = bank.to(torch.bfloat16)
del bank
backbone = backbone.to(memory_format=torch.channels_last)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
with torch.inference_mode():
    scores = []
    for i in range(N_TEST // BATCH):
        x = torch.randn(BATCH, 3, RES, RES, device=device).to(memory_format=torch.channels_last)
        with torch.autocast(**amp):
            f, (h, w) = patch_features(x)
        f = f.to(torch.bfloat16)
        patch_scores = []
        for q in f.split(Q_CHUNK):
            best = torch.full((q.shape[0], 3), float("inf"), device=device)
            for b in bank16.split(B_CHUNK):
                with torch.autocast(**amp):
                    d = torch.cdist(q, b)  # cdist runs in fp32 under autocast
                cand = torch.cat([best, d.topk(3, dim=1, largest=False).values], dim=1)
                best = cand.topk(3, dim=1, largest=False).values
                del d
            patch_scores.append(best.mean(dim=1))
        scores.append(torch.cat(patch_scores).view(BATCH, -1).max(dim=1).values)
    scores = torch.cat(scores)
print(f"full-bank bf16 scores mean {scores.float().mean().item():.4f}")
report("full bank bf16 channels_last")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
