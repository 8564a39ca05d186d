"""HF VitPoseForPoseEstimation (ViTPose-B: a ViT-B/16 backbone on 256x192 person crops, the
classic deconvolution decoder to 64x48 heatmaps of 17 COCO keypoints) built from its config,
trained in bf16 autocast with AdamW and layer-wise lr decay groups on Gaussian target heatmaps
rendered on the GPU, keypoint-visibility-weighted MSE, batch 48; 4 steps, then flip-test
inference on 96 crops (heatmaps of the flipped crops flipped back with left/right keypoints
swapped, averaged) with argmax decoding of keypoint coordinates; 2 phases."""

import os

import torch
from transformers import VitPoseBackboneConfig, VitPoseConfig, VitPoseForPoseEstimation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8902)
if SMALL:
    backbone = VitPoseBackboneConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=[64, 48],
        out_indices=[2],
        out_features=["stage2"],
    )
    B, EVAL, STEPS = 2, 3, 2
else:
    backbone = VitPoseBackboneConfig()
    B, EVAL, STEPS = 48, 96, 4
config = VitPoseConfig(backbone_config=backbone, use_simple_decoder=False)
config.num_labels = 17
K = 17
H, W = backbone.image_size
HH, HW = H // 4, W // 4
FLIP = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VitPoseForPoseEstimation(config).to(device)
groups = []
for name, p in model.named_parameters():
    depth = backbone.num_hidden_layers + 1
    if ".layer." in name:
        depth = int(name.split(".layer.")[1].split(".")[0]) + 1
    elif "embeddings" in name:
        depth = 0
    groups.append({"params": [p], "lr": 5e-4 * 0.75 ** (backbone.num_hidden_layers + 1 - depth)})
opt = torch.optim.AdamW(groups, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} heads {config.num_labels}")
    torch.cuda.reset_peak_memory_stats()


def targets(b):
    centers = torch.rand(b, K, 2, device=device) * torch.tensor([HW, HH], device=device)
    visible = (torch.rand(b, K, device=device) > 0.2).float()
    ys = torch.arange(HH, device=device).view(1, 1, HH, 1)
    xs = torch.arange(HW, device=device).view(1, 1, 1, HW)
    d2 = (xs - centers[..., 0, None, None]) ** 2 + (ys - centers[..., 1, None, None]) ** 2
    return torch.exp(-d2 / (2 * 2.0**2)), visible


model.train()
for _ in range(STEPS):
    pixels = torch.randn(B, 3, H, W, device=device)
    heat, visible = targets(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        pred = model(pixel_values=pixels).heatmaps
    loss = (((pred.float() - heat) ** 2).mean((2, 3)) * visible).mean() * 0.5
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
if device == "cuda":
    print(
        f"train loss {loss.item():.6f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del pixels, heat, visible, pred, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    pixels = torch.randn(EVAL, 3, H, W, device=device)
    heat = model(pixel_values=torch.cat([pixels, pixels.flip(-1)])).heatmaps.float()
    heat = (heat[:EVAL] + heat[EVAL:].flip(-1)[:, FLIP]) / 2
    score, idx = heat.flatten(2).max(-1)
    coords = torch.stack([idx % HW, idx // HW], -1).float() * 4
if device == "cuda":
    print(
        f"flip test {tuple(coords.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
