"""Top-down human pose estimation with SimCC coordinate classification (RTMPose-style head written by hand),
on a torchvision backbone. Backbone: torchvision 0.26's `mobilenet_v3_large(weights=None).features` (stride
32, 960 channels). Head: a 7 x 7 conv to 17 keypoint maps (8 x 6 at 256 x 192 input), each flattened to 48
and lifted to 256 by a Linear, a Gated Attention Unit over the 17 keypoint tokens (SiLU-gated u/v, shared
base projected to q/k by per-dimension scale and offset, squared-ReLU attention, residual), then two
classifiers onto 1D x and y bins (simcc split ratio 2: 384 and 512 bins). Targets: 1D Gaussians (sigma 6
bins) around random keypoints with a visibility weight; loss: RTMPose's KL discrete loss (label softmax
with beta 10, temperature-scaled log-softmax, `F.kl_div(reduction="none")`, weighted mean).
Phase 1: the model, `AdamW` and `SequentialLR(LinearLR warm-up, CosineAnnealingLR)`.
Phase 2: 4 steps at 128 crops of 256 x 192 under bf16 autocast.
Phase 3: flip test under `torch.inference_mode()` + fp16 autocast at 256 crops: the horizontally flipped
batch, its x logits reversed and keypoints swapped by the left/right index, averaged with the plain pass,
argmax decoding.
Phase 4: crops cut from 2 full frames of 720 x 1280 by `torchvision.ops.roi_align(aligned=True)` at 40 person
boxes a frame (output 256 x 192), then the same inference.
4 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import mobilenet_v3_large
from torchvision.ops import roi_align

torch.manual_seed(30805)
dev = "cuda"
K, H, W, SPLIT, HID = 17, 256, 192, 2.0, 256
FLIP_INDEX = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class ScaleNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim**-0.5
        self.g = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x / torch.norm(x, dim=-1, keepdim=True).clamp(min=1e-5) * self.scale * self.g


class GAU(nn.Module):
    def __init__(self, dim, expansion=2, s=128):
        super().__init__()
        self.e, self.s = int(dim * expansion), s
        self.ln = ScaleNorm(dim)
        self.uv = nn.Linear(dim, 2 * self.e + s, bias=False)
        self.gamma = nn.Parameter(torch.randn(2, s) * 0.02)
        self.beta = nn.Parameter(torch.zeros(2, s))
        self.o = nn.Linear(self.e, dim, bias=False)

    def forward(self, x):
        u, v, base = torch.split(F.silu(self.uv(self.ln(x))), [self.e, self.e, self.s], dim=-1)
        base = base.unsqueeze(2) * self.gamma[None, None] + self.beta[None, None]
        q, k = base.unbind(2)
        attn = F.relu(q @ k.transpose(1, 2) / self.s**0.5).square()
        return x + self.o(u * (attn @ v))


class SimCCPose(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = mobilenet_v3_large(weights=None).features
        self.final = nn.Conv2d(960, K, 7, padding=3)
        self.mlp = nn.Sequential(ScaleNorm(48), nn.Linear(48, HID, bias=False))
        self.gau = GAU(HID)
        self.cls_x = nn.Linear(HID, int(W * SPLIT), bias=False)
        self.cls_y = nn.Linear(HID, int(H * SPLIT), bias=False)

    def forward(self, x):
        feats = self.final(self.backbone(x)).flatten(2)  # B, K, 48
        tokens = self.gau(self.mlp(feats))
        return self.cls_x(tokens), self.cls_y(tokens)


def gaussian_targets(kpts, bins, sigma=6.0):
    grid = torch.arange(bins, device=dev, dtype=torch.float32)
    return torch.exp(-((grid - kpts[..., None] * SPLIT) ** 2) / (2 * sigma**2))


def kl_discret_loss(pred, target, weight, beta=10.0, tau=1.0):
    log_pt = F.log_softmax(pred.float() * tau, dim=-1)
    target = F.softmax(target * beta, dim=-1)
    loss = F.kl_div(log_pt, target, reduction="none").mean(-1)
    return (loss * weight).mean()


model = SimCCPose().to(dev)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.SequentialLR(
    optimizer,
    [
        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1e-3, total_iters=10),
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200),
    ],
    milestones=[10],
)
report("phase1 build")

model.train()
for step in range(4):
    x = torch.randn(128, 3, H, W, device=dev)
    kpts = torch.rand(128, K, 2, device=dev) * torch.tensor([W, H], device=dev)
    vis = (torch.rand(128, K, device=dev) > 0.2).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        px, py = model(x)
    loss = kl_discret_loss(px, gaussian_targets(kpts[..., 0], int(W * SPLIT)), vis)
    loss = loss + kl_discret_loss(py, gaussian_targets(kpts[..., 1], int(H * SPLIT)), vis)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f}")
del x, kpts, vis, px, py, loss
report("phase2 train")

flip_index = torch.tensor(FLIP_INDEX, device=dev)


def predict(crops):
    px, py = model(crops)
    fx, fy = model(crops.flip(3))
    fx = fx.flip(2)[:, flip_index]
    fy = fy[:, flip_index]
    px, py = (px.float() + fx.float()) / 2, (py.float() + fy.float()) / 2
    x = px.argmax(-1).float() / SPLIT
    y = py.argmax(-1).float() / SPLIT
    conf = torch.minimum(px.softmax(-1).amax(-1), py.softmax(-1).amax(-1))
    return torch.stack([x, y], -1), conf


model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    crops = torch.randn(256, 3, H, W, device=dev)
    coords, conf = predict(crops)
    print("coords", tuple(coords.shape), float(conf.mean()))
del crops, coords, conf
report("phase3 flip test")

with torch.inference_mode():
    frames = torch.randn(2, 3, 720, 1280, device=dev)
    xy = torch.rand(2, 40, 2, device=dev) * torch.tensor([1000.0, 400.0], device=dev)
    wh = torch.rand(2, 40, 2, device=dev) * torch.tensor([200.0, 250.0], device=dev) + 60
    boxes = [torch.cat([xy[i], xy[i] + wh[i]], 1) for i in range(2)]
    crops = roi_align(frames, boxes, output_size=(H, W), spatial_scale=1.0, sampling_ratio=2, aligned=True)
    with torch.autocast("cuda", dtype=torch.float16):
        coords, conf = predict(crops)
    print("frame crops", tuple(crops.shape), tuple(coords.shape))
report("phase4 crops")
