"""Natural image matting with HF transformers ViTMatte-S (a ViTDet backbone: 4-channel RGB+trimap
patch embedding, windowed attention with decomposed relative positions in 8 of 12 blocks and
residual conv blocks after the others, plus a conv stream and fusion decoder), built from the
hustvl/vitmatte-small layout (384 wide, 6 heads, window 14); batch 4 of 512 x 512 composites with
trimaps made on the GPU, L1 alpha loss over the trimap's unknown band plus a composition loss,
AdamW (backbone lr x 0.1 via param groups) under bf16 autocast for 3 steps, then an inference_mode
prediction at 640 x 640 for 2 images; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import VitDetConfig, VitMatteConfig, VitMatteForImageMatting

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10602)
if SMALL:
    backbone = VitDetConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_channels=4,
        image_size=64,
        pretrain_image_size=32,
        window_block_indices=[0, 2],
        residual_block_indices=[1, 3],
        use_relative_position_embeddings=True,
        window_size=2,
        out_features=["stage4"],
    )
    cfg = VitMatteConfig(
        backbone_config=backbone,
        hidden_size=32,
        convstream_hidden_sizes=[8, 16, 32],
        fusion_hidden_sizes=[32, 16, 8, 8],
    )
    B, R, R_EVAL, STEPS = 2, 64, 96, 2
else:
    backbone = VitDetConfig(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        num_channels=4,
        image_size=512,
        pretrain_image_size=224,
        window_block_indices=[0, 1, 3, 4, 6, 7, 9, 10],
        residual_block_indices=[2, 5, 8, 11],
        use_relative_position_embeddings=True,
        window_size=14,
        out_features=["stage12"],
    )
    cfg = VitMatteConfig(
        backbone_config=backbone,
        hidden_size=384,
        convstream_hidden_sizes=[48, 96, 192],
        fusion_hidden_sizes=[256, 128, 64, 32],
    )
    B, R, R_EVAL, STEPS = 4, 512, 640, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VitMatteForImageMatting(cfg).to(device)
backbone_params = list(model.backbone.parameters())
ids = {id(p) for p in backbone_params}
decoder_params = [p for p in model.parameters() if id(p) not in ids]
opt = torch.optim.AdamW([{"params": backbone_params, "lr": 5e-5}, {"params": decoder_params, "lr": 5e-4}])


def make_batch(n, r):
    alpha = torch.sigmoid(
        8 * F.interpolate(torch.randn(n, 1, r // 32, r // 32, device=device), size=r, mode="bilinear")
    )
    fg = torch.rand(n, 3, r, r, device=device)
    bg = torch.rand(n, 3, r, r, device=device)
    image = alpha * fg + (1 - alpha) * bg
    trimap = torch.where(alpha > 0.95, 1.0, torch.where(alpha < 0.05, 0.0, 0.5))
    return torch.cat([image, trimap], dim=1), alpha, fg, bg, (trimap == 0.5).float()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    pixel_values, alpha, fg, bg, unknown = make_batch(B, R)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(pixel_values=pixel_values).alphas
    pred = pred.float()
    n_unknown = unknown.sum().clamp_min(1.0)
    l_alpha = ((pred - alpha).abs() * unknown).sum() / n_unknown
    comp = pred * fg + (1 - pred) * bg
    l_comp = ((comp - pixel_values[:, :3]).abs() * unknown).sum() / n_unknown
    loss = l_alpha + 0.5 * l_comp
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pixel_values, alpha, fg, bg, unknown, pred, comp, loss, l_alpha, l_comp
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    pixel_values, alpha, fg, bg, unknown = make_batch(2, R_EVAL)
    pred = model(pixel_values=pixel_values).alphas
    sad = (pred.float() - alpha).abs().sum()
if device == "cuda":
    print(
        f"eval sad {sad.item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
