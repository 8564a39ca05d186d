"""Three classic anomaly detectors on random images.

PaDiM (Defard et al. 2021), WRN-50 variant: a frozen torchvision wide_resnet50_2 (random init) with forward
hooks on layer1-3; the maps are aligned to layer1's 56 x 56 grid by the reference implementation's
embedding_concat (F.unfold of the finer map into the coarser map's cells, a zero tensor filled cell by
cell with torch.cat, F.fold back), 550 of the 1,792 channels kept by a random torch.index_select; each of
the 3,136 positions gets a Gaussian (mean, covariance by torch.einsum over the centred training embeddings
+ 0.01 I) and the covariances are inverted by one batched torch.linalg.inv (3,136 x 550 x 550); test
patches are scored by the Mahalanobis distance (a batched matmul over positions), upsampled to 224 x 224
and smoothed by torchvision's gaussian_blur.

Deep SVDD (Ruff et al. 2018): a bias-free LeNet-style CNN (BatchNorm2d(affine=False), leaky ReLU, max pool)
on 128 x 128 images mapping to 128-d, the hypersphere centre from an initial no_grad pass (near-zero
coordinates pushed to +-eps with torch.where), one-class loss = mean squared distance to the centre, Adam
(amsgrad, weight decay 1e-6).

MemAE (Gong et al. 2019): a conv encoder (256 x 256 -> 32 x 32 x 256), a memory of 2,000 items addressed by
softmax attention of every latent position, hard shrinkage relu(w - lambda) * w / (|w - lambda| + eps) and
L1 renormalisation, the latent rebuilt from memory and decoded by ConvTranspose2d; MSE + 0.0002 x the
attention entropy.

Phases: PaDiM fit under inference_mode (128 images at batch 32, fp32); PaDiM scoring of 64 test images;
Deep SVDD training at batch 1,024 (fp32, 5 steps); MemAE training under bf16 autocast with fused AdamW
at batch 32 (3 steps); MemAE reconstruction scores under no_grad at batch 64. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.transforms.functional import gaussian_blur

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2194)
device = "cuda" if torch.cuda.is_available() else "cpu"
RES = 64 if SMALL else 224
N_TRAIN, N_TEST, BATCH, D_KEEP = (8, 4, 4, 50) if SMALL else (128, 64, 32, 550)
SVDD_BATCH, SVDD_RES = (16, 64) if SMALL else (1024, 128)
MEM_BATCH, MEM_EVAL, MEM_RES, MEM_ITEMS = (4, 8, 64, 100) if SMALL else (32, 64, 256, 2000)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# ---------------- PaDiM ----------------
backbone = torchvision.models.wide_resnet50_2(weights=None).to(device).eval()
outputs = []
for layer in (backbone.layer1, backbone.layer2, backbone.layer3):
    layer.register_forward_hook(lambda m, i, o: outputs.append(o))


def embedding_concat(x, y):
    B, C1, H1, W1 = x.size()
    _, C2, H2, W2 = y.size()
    s = int(H1 / H2)
    x = F.unfold(x, kernel_size=s, dilation=1, stride=s)
    x = x.view(B, C1, -1, H2, W2)
    z = torch.zeros(B, C1 + C2, x.size(2), H2, W2, device=x.device)
    for i in range(x.size(2)):
        z[:, :, i, :, :] = torch.cat((x[:, :, i, :, :], y), 1)
    z = z.view(B, -1, H2 * W2)
    z = F.fold(z, kernel_size=s, output_size=(H1, W1), stride=s)
    return z


channel_idx = torch.randperm(256 + 512 + 1024)[:D_KEEP].to(device)


def padim_embed(x):
    outputs.clear()
    backbone(x)
    emb = embedding_concat(embedding_concat(outputs[0], outputs[1]), outputs[2])
    outputs.clear()
    return torch.index_select(emb, 1, channel_idx)


# 1. PaDiM fit
with torch.inference_mode():
    train = torch.cat(
        [padim_embed(torch.randn(BATCH, 3, RES, RES, device=device)) for _ in range(N_TRAIN // BATCH)]
    )
    N, C, H, W = train.shape
    train = train.view(N, C, H * W)
    mean = train.mean(dim=0)
    centred = train - mean
    cov = torch.einsum("ncp,ndp->pcd", centred, centred) / (N - 1)
    cov += 0.01 * torch.eye(C, device=device)
    del centred, train
    cov_inv = torch.linalg.inv(cov)
    del cov
print(f"padim gaussians {tuple(cov_inv.shape)}")
report("padim fit")

# 2. PaDiM scoring
with torch.inference_mode():
    score_maps = []
    for i in range(N_TEST // BATCH):
        emb = padim_embed(torch.randn(BATCH, 3, RES, RES, device=device)).view(BATCH, C, H * W)
        delta = (emb - mean).permute(2, 0, 1)  # positions, batch, channels
        dist = torch.bmm(delta, cov_inv).mul_(delta).sum(-1).clamp_min_(0).sqrt_()
        dist = dist.T.reshape(BATCH, 1, H, W)
        amap = F.interpolate(dist, size=(RES, RES), mode="bilinear", align_corners=False)
        score_maps.append(gaussian_blur(amap, kernel_size=33, sigma=4.0))
    score_maps = torch.cat(score_maps)
    img_scores = score_maps.amax(dim=(1, 2, 3))
print(f"padim image scores {img_scores.mean().item():.4f}")
report("padim scoring")
del cov_inv, mean, score_maps, backbone, outputs


# 3. Deep SVDD
class SVDDNet(nn.Module):
    def __init__(self, rep=128):
        super().__init__()
        self.pool = nn.MaxPool2d(2, 2)
        self.conv1 = nn.Conv2d(3, 32, 5, bias=False, padding=2)
        self.bn1 = nn.BatchNorm2d(32, eps=1e-4, affine=False)
        self.conv2 = nn.Conv2d(32, 64, 5, bias=False, padding=2)
        self.bn2 = nn.BatchNorm2d(64, eps=1e-4, affine=False)
        self.conv3 = nn.Conv2d(64, 128, 5, bias=False, padding=2)
        self.bn3 = nn.BatchNorm2d(128, eps=1e-4, affine=False)
        self.fc1 = nn.Linear(128 * (SVDD_RES // 8) ** 2, rep, bias=False)

    def forward(self, x):
        x = self.pool(F.leaky_relu(self.bn1(self.conv1(x))))
        x = self.pool(F.leaky_relu(self.bn2(self.conv2(x))))
        x = self.pool(F.leaky_relu(self.bn3(self.conv3(x))))
        return self.fc1(x.flatten(1))


svdd = SVDDNet().to(device)
with torch.no_grad():
    c = sum(svdd(torch.randn(SVDD_BATCH, 3, SVDD_RES, SVDD_RES, device=device)).sum(0) for _ in range(2))
    c = c / (2 * SVDD_BATCH)
    eps = 0.1
    c = torch.where((c.abs() < eps) & (c < 0), torch.full_like(c, -eps), c)
    c = torch.where((c.abs() < eps) & (c > 0), torch.full_like(c, eps), c)
opt = torch.optim.Adam(svdd.parameters(), lr=1e-4, weight_decay=1e-6, amsgrad=True)
svdd.train()
for step in range(5):
    z = svdd(torch.randn(SVDD_BATCH, 3, SVDD_RES, SVDD_RES, device=device))
    loss = torch.sum((z - c) ** 2, dim=1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"deep svdd loss {loss.item():.6f}")
report("deep svdd fp32 adam amsgrad")
del opt, svdd


# 4. MemAE
class MemoryModule(nn.Module):
    def __init__(self, items, dim, shrink=0.0025):
        super().__init__()
        self.memory = nn.Parameter(torch.empty(items, dim).uniform_(-1 / dim**0.5, 1 / dim**0.5))
        self.shrink = shrink

    def forward(self, z):
        b, d, h, w = z.shape
        q = z.permute(0, 2, 3, 1).reshape(-1, d)
        att = F.softmax(F.linear(q, self.memory), dim=1)
        att = F.relu(att - self.shrink) * att / (torch.abs(att - self.shrink) + 1e-12)
        att = F.normalize(att, p=1, dim=1)
        out = att @ self.memory
        return out.view(b, h, w, d).permute(0, 3, 1, 2), att


class MemAE(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [3, 64, 128, 256]
        enc = []
        for a, b in zip(chans[:-1], chans[1:]):
            enc += [nn.Conv2d(a, b, 3, 2, 1), nn.BatchNorm2d(b), nn.LeakyReLU(0.2, inplace=True)]
        self.encoder = nn.Sequential(*enc)
        self.memory = MemoryModule(MEM_ITEMS, 256)
        dec = []
        for a, b in zip(chans[::-1][:-1], chans[::-1][1:]):
            dec += [nn.ConvTranspose2d(a, b, 4, 2, 1)]
            if b != 3:
                dec += [nn.BatchNorm2d(b), nn.LeakyReLU(0.2, inplace=True)]
        self.decoder = nn.Sequential(*dec)

    def forward(self, x):
        z, att = self.memory(self.encoder(x))
        return self.decoder(z), att


memae = MemAE().to(device)
opt = torch.optim.AdamW(memae.parameters(), lr=2e-4, weight_decay=1e-4, fused=device == "cuda")
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
memae.train()
for step in range(3):
    x = torch.randn(MEM_BATCH, 3, MEM_RES, MEM_RES, device=device)
    with torch.autocast(**amp):
        rec, att = memae(x)
        entropy = (-att * torch.log(att + 1e-12)).sum(dim=1).mean()
        loss = F.mse_loss(rec.float(), x) + 0.0002 * entropy
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"memae loss {loss.item():.4f}")
report("memae bf16 fused adamw")

# 5. MemAE reconstruction scores
memae.eval()
with torch.no_grad(), torch.autocast(**amp):
    x = torch.randn(MEM_EVAL, 3, MEM_RES, MEM_RES, device=device)
    rec, _ = memae(x)
    err = (rec.float() - x).pow(2).mean(dim=1)
    scores = err.flatten(1).mean(1)
print(f"memae scores {scores.mean().item():.4f}")
report("memae eval")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
