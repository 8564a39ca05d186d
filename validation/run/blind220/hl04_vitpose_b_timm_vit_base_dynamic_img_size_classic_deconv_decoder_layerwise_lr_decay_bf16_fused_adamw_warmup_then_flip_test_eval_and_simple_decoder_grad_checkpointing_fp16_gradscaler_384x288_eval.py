"""ViTPose-B (Xu et al. 2022): a timm ViT-B/16 (vit_base_patch16_224, random init, no class token,
img_size 256 x 192, dynamic_img_size, drop path 0.3) whose 16 x 12 patch tokens are reshaped to a feature
map and decoded to 17 heatmaps at 64 x 48. The classic decoder is two ConvTranspose2d(768/256 -> 256,
4, 2, 1) + BN + ReLU layers and a 1x1 conv; the simple decoder is ReLU, bilinear upsampling by 4 and a 3x3
conv. AdamW with ViTPose's layer-wise learning-rate decay (0.75 per block; no decay on norms, biases and
the position embedding) and a linear warmup by LambdaLR; a joint-weighted heatmap MSE loss.

Phases: 3 steps at batch 64 under bf16 autocast with fused AdamW (classic decoder); flip-test evaluation at
batch 128 under inference_mode and bf16 autocast (flipped heatmaps mirrored back, joints swapped,
averaged); the simple decoder trained 3 steps with timm's set_grad_checkpointing under fp16 autocast with a
GradScaler and foreach AdamW at batch 96; evaluation at 384 x 288 (24 x 18 tokens, the position embedding
interpolated by timm) under no_grad in bf16 autocast at batch 64. 4 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2204)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, CKPT_BATCH, HI_BATCH = (2, 2, 2, 2) if SMALL else (64, 128, 96, 64)
RES, RES_HI = ((64, 48), (128, 96)) if SMALL else ((256, 192), (384, 288))
JOINTS = 17
FLIP_INDEX = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ClassicDecoder(nn.Module):
    def __init__(self, cin=768):
        super().__init__()
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(cin, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(256, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(inplace=True),
        )
        self.final = nn.Conv2d(256, JOINTS, 1)

    def forward(self, x):
        return self.final(self.deconv(x))


class SimpleDecoder(nn.Module):
    def __init__(self, cin=768):
        super().__init__()
        self.conv = nn.Conv2d(cin, JOINTS, 3, padding=1)

    def forward(self, x):
        x = F.interpolate(F.relu(x), scale_factor=4, mode="bilinear", align_corners=False)
        return self.conv(x)


class ViTPose(nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.backbone = timm.create_model(
            "vit_base_patch16_224", pretrained=False, img_size=RES, class_token=False, global_pool="",
            num_classes=0, dynamic_img_size=True, drop_path_rate=0.3,
        )
        self.decoder = decoder

    def forward(self, x):
        h, w = x.shape[-2] // 16, x.shape[-1] // 16
        tokens = self.backbone.forward_features(x)
        feat = tokens.transpose(1, 2).reshape(x.shape[0], -1, h, w)
        return self.decoder(feat)


def param_groups(model, lr, decay_rate=0.75, wd=0.1):
    depth = len(model.backbone.blocks)
    groups = {}
    for name, p in model.named_parameters():
        if name.startswith("backbone.blocks."):
            layer = int(name.split(".")[2]) + 1
        elif name.startswith("backbone.") and ("patch_embed" in name or "pos_embed" in name):
            layer = 0
        else:
            layer = depth + 1
        no_decay = p.ndim == 1 or "pos_embed" in name
        key = (layer, no_decay)
        if key not in groups:
            scale = decay_rate ** (depth + 1 - layer)
            groups[key] = {"params": [], "lr": lr * scale, "weight_decay": 0.0 if no_decay else wd}
        groups[key]["params"].append(p)
    return list(groups.values())


def targets(n, res, sigma=2.0):
    h, w = res[0] // 4, res[1] // 4
    c = torch.rand(n, JOINTS, 2, device=device) * torch.tensor([w - 1, h - 1], device=device)
    ys = torch.arange(h, device=device, dtype=torch.float32).view(1, 1, h, 1)
    xs = torch.arange(w, device=device, dtype=torch.float32).view(1, 1, 1, w)
    heat = torch.exp(-((xs - c[..., 0, None, None]) ** 2 + (ys - c[..., 1, None, None]) ** 2) / (2 * sigma**2))
    weight = (torch.rand(n, JOINTS, 1, 1, device=device) > 0.2).float()
    return heat, weight


def heat_loss(pred, heat, weight):
    return 0.5 * ((pred.float() - heat) ** 2 * weight).mean()


def warmup(step, steps=500):
    return min(1.0, (step + 1) / steps)


model = ViTPose(ClassicDecoder()).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")
opt = torch.optim.AdamW(param_groups(model, 5e-4), betas=(0.9, 0.999), fused=device == "cuda")
sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
for it in range(3):
    x = torch.randn(BATCH, 3, *RES, device=device)
    heat, weight = targets(BATCH, RES)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(x)
    loss = heat_loss(pred, heat, weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    del pred
print(f"bf16 loss {loss.item():.6f} groups {len(opt.param_groups)}")
report("vitpose-b classic decoder bf16 fused adamw")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EVAL_BATCH, 3, *RES, device=device)
    out = model(x)
    out_f = torch.flip(model(torch.flip(x, [3])), [3])[:, FLIP_INDEX]
    heat = (out.float() + out_f.float()) / 2
    score = heat.flatten(2).amax(2)
print(f"flip eval score {score.mean().item():.4f}")
report("flip test inference_mode bf16")

del opt, sched, out, out_f, heat
model.decoder = SimpleDecoder().to(device)
model.train()
model.backbone.set_grad_checkpointing(True)
opt = torch.optim.AdamW(param_groups(model, 5e-4), foreach=True)
scaler = torch.amp.GradScaler(device, init_scale=2.0**12, enabled=device == "cuda")
for it in range(3):
    x = torch.randn(CKPT_BATCH, 3, *RES, device=device)
    heat, weight = targets(CKPT_BATCH, RES)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        pred = model(x)
    loss = heat_loss(pred, heat, weight)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    del pred
print(f"fp16 checkpointed loss {loss.item():.6f} scale {scaler.get_scale():.0f}")
report("simple decoder grad checkpointing fp16 gradscaler")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(HI_BATCH, 3, *RES_HI, device=device)
    heat = model(x)
print(f"384x288 heatmaps {tuple(heat.shape)} max {heat.float().amax().item():.4f}")
report("eval 384x288 bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
