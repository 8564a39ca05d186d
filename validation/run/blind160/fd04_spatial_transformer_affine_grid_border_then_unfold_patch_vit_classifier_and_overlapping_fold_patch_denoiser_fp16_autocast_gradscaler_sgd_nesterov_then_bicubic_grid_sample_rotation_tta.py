"""A spatial-transformer front end feeding two patch models that use F.unfold and F.fold directly
instead of strided convolutions: a localization network (3 conv + max-pool stages and a 2-layer
MLP, the last layer initialised to the identity affine) predicts theta, F.affine_grid builds the
sampling grid and F.grid_sample (bilinear, padding_mode='border', align_corners=False) resamples the
256 x 256 input; then (a) a ViT classifier whose patch embedding is F.unfold(16, stride 16) and a
Linear over 768 values per patch, a learned class token and position embedding, 6 pre-norm
nn.TransformerEncoderLayer blocks (384 wide, 6 heads, GELU, batch_first) and a 100-class head, and
(b) a denoiser over overlapping 8 x 8 patches at stride 4 (F.unfold to (B, 192, 3,969), two 1 x 1
Conv1d with 512 hidden channels across each patch, F.fold back and divided by F.fold of ones for
the overlap count) trained with MSE against the clean warped image. fp16 autocast with GradScaler,
SGD nesterov momentum 0.9 lr 0.05 weight decay 5e-5 with a OneCycleLR schedule, batch 64, 3 steps
(each its own phase); then no_grad test-time augmentation at batch 32 of 320 x 320: the input
rotated by 0, 90, 180 and 270 degrees through affine_grid and grid_sample (mode='bicubic',
padding_mode='reflection'), the four predictions averaged; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16004)
if SMALL:
    B, SIDE, EVAL_B, EVAL_SIDE, WIDTH, DEPTH, HEADS, STEPS = 2, 64, 2, 80, 64, 1, 2, 3
else:
    B, SIDE, EVAL_B, EVAL_SIDE, WIDTH, DEPTH, HEADS, STEPS = 64, 256, 32, 320, 384, 6, 6, 3
PATCH, DN_K, DN_S, CLASSES = 16, 8, 4, 100
device = "cuda" if torch.cuda.is_available() else "cpu"


class Localization(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 7, padding=3), nn.MaxPool2d(4), nn.ReLU(True),
            nn.Conv2d(32, 64, 5, padding=2), nn.MaxPool2d(4), nn.ReLU(True),
            nn.Conv2d(64, 64, 3, padding=1), nn.AdaptiveAvgPool2d(4), nn.ReLU(True),
        )  # fmt: skip
        self.fc_loc = nn.Sequential(nn.Linear(64 * 16, 128), nn.ReLU(True), nn.Linear(128, 6))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def forward(self, x):
        theta = self.fc_loc(self.features(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class UnfoldViT(nn.Module):
    def __init__(self, side):
        super().__init__()
        n = (side // PATCH) ** 2
        self.embed = nn.Linear(3 * PATCH * PATCH, WIDTH)
        self.cls = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos = nn.Parameter(torch.randn(1, n + 1, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(
            WIDTH, HEADS, 4 * WIDTH, 0.0, "gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        patches = F.unfold(x, kernel_size=PATCH, stride=PATCH).transpose(1, 2)
        tokens = self.embed(patches)
        pos = self.pos
        if pos.shape[1] != tokens.shape[1] + 1:
            side = int(math.sqrt(pos.shape[1] - 1))
            new = int(math.sqrt(tokens.shape[1]))
            grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
            grid = F.interpolate(grid, size=(new, new), mode="bicubic", align_corners=False)
            pos = torch.cat([pos[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + pos
        return self.head(self.norm(self.blocks(tokens))[:, 0])


class FoldDenoiser(nn.Module):
    def __init__(self):
        super().__init__()
        c = 3 * DN_K * DN_K
        self.mlp = nn.Sequential(nn.Conv1d(c, 512, 1), nn.GELU(), nn.Conv1d(512, c, 1))

    def forward(self, x):
        size = x.shape[-2:]
        cols = F.unfold(x, kernel_size=DN_K, stride=DN_S)
        cols = cols + self.mlp(cols)
        out = F.fold(cols, size, kernel_size=DN_K, stride=DN_S)
        norm = F.fold(torch.ones_like(cols), size, kernel_size=DN_K, stride=DN_S)
        return out / norm


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stn = Localization()
        self.vit = UnfoldViT(SIDE)
        self.denoiser = FoldDenoiser()

    def forward(self, x, noisy=None):
        warped = self.stn(x)
        logits = self.vit(warped)
        if noisy is None:
            return logits
        return logits, warped, self.denoiser(noisy)


def rotate(x, degrees):
    a = math.radians(degrees)
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]], device=x.device)
    grid = F.affine_grid(theta.expand(x.shape[0], 2, 3), x.size(), align_corners=False)
    return F.grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=False)


model = Model().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=100)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.rand(B, 3, SIDE, SIDE, device=device)
    y = torch.randint(0, CLASSES, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        clean = x
        noisy = clean + 0.1 * torch.randn_like(clean)
        logits, warped, denoised = model(x, noisy)
        loss = F.cross_entropy(logits, y) + F.mse_loss(denoised.float(), clean)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, warped, denoised, loss, x, noisy, clean
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    x = torch.rand(EVAL_B, 3, EVAL_SIDE, EVAL_SIDE, device=device)
    probs = sum(F.softmax(model(rotate(x, d)).float(), -1) for d in (0, 90, 180, 270)) / 4
    pred = probs.argmax(-1)
if device == "cuda":
    print(
        f"eval pred0 {pred[0].item()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
