"""HF transformers CvT-13 (convolutional token embeddings, depthwise-convolution + BatchNorm q/k/v
projections, a class token in the last stage, drop path 0.1) built from its default config for
1,000 classes, fp32 weights trained under bf16 autocast with AdamW and a OneCycleLR schedule,
gradient accumulation over 2 micro-batches of 64 images at 224 x 224 made on the GPU, loss from the
model's labels, 3 optimizer steps; then the top-5 predictions of 192 images under inference_mode;
5 phases."""

import os

import torch
from transformers import CvtConfig, CvtForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9804)
if SMALL:
    cfg = CvtConfig(embed_dim=[16, 32, 64], num_heads=[1, 2, 4], depth=[1, 2, 3], num_labels=10)
    B, BE, R = 4, 6, 64
else:
    cfg = CvtConfig(num_labels=1000)
    B, BE, R = 64, 192, 224
cfg.drop_path_rate = [0.0, 0.0, 0.1]
ACCUM, STEPS = 2, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CvtForImageClassification(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    for _micro in range(ACCUM):
        x = torch.randn(B, 3, R, R, device=device)
        y = torch.randint(0, cfg.num_labels, (B,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(pixel_values=x, labels=y).loss / ACCUM
        loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    xe = torch.randn(BE, 3, R, R, device=device)
    top5 = model(pixel_values=xe).logits.topk(5, dim=-1).indices
if device == "cuda":
    print(
        f"eval {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
