"""HF SigLIP2 (NaFlex) built from a config: a ViT-B/16-sized vision tower over packed patch
sequences of images at their own aspect ratios (host-given patch grids up to 256 patches, padded,
pixel_attention_mask and spatial_shapes, its position embeddings resized per image by bilinear
antialiased interpolation) and a 12-layer text tower over 64 tokens; the pairwise sigmoid loss
(return_loss=True), fp32 weights under fp16 autocast with GradScaler, AdamW, batches of 32 pairs,
3 steps, then no_grad embeddings for 64 images; 5 phases."""

import os

import torch
from transformers import Siglip2Config, Siglip2Model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10905)
device = "cuda" if torch.cuda.is_available() else "cpu"
P = 16
MAXP = 64 if SMALL else 256
B = 4 if SMALL else 32
cfg = Siglip2Config(
    text_config=dict(
        vocab_size=500 if SMALL else 32000,
        hidden_size=64 if SMALL else 768,
        intermediate_size=128 if SMALL else 3072,
        num_hidden_layers=2 if SMALL else 12,
        num_attention_heads=4 if SMALL else 12,
        max_position_embeddings=64,
        bos_token_id=2,
        eos_token_id=3,
    ),
    vision_config=dict(
        hidden_size=64 if SMALL else 768,
        intermediate_size=128 if SMALL else 3072,
        num_hidden_layers=2 if SMALL else 12,
        num_attention_heads=4 if SMALL else 12,
        patch_size=P,
        num_patches=MAXP,
    ),
)
model = Siglip2Model(cfg).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
GRIDS = (
    [(8, 8), (6, 10), (10, 6), (4, 16), (7, 9)]
    if SMALL
    else [(16, 16), (12, 21), (21, 12), (8, 32), (14, 18), (10, 25), (13, 19)]
)


def pairs(n, step):
    grids = [GRIDS[(i + step) % len(GRIDS)] for i in range(n)]
    pixels = torch.zeros(n, MAXP, 3 * P * P)
    pmask = torch.zeros(n, MAXP, dtype=torch.long)
    for i, (h, w) in enumerate(grids):
        pixels[i, : h * w] = torch.randn(h * w, 3 * P * P)
        pmask[i, : h * w] = 1
    shapes = torch.tensor(grids, dtype=torch.long)
    ids = torch.randint(2, cfg.text_config.vocab_size, (n, 64))
    return dict(
        input_ids=ids.to(device),
        pixel_values=pixels.to(device),
        pixel_attention_mask=pmask.to(device),
        spatial_shapes=shapes.to(device),
    )


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(**pairs(B, step), return_loss=True).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    b = pairs(2 * B, 5)
    emb = model.get_image_features(
        pixel_values=b["pixel_values"],
        pixel_attention_mask=b["pixel_attention_mask"],
        spatial_shapes=b["spatial_shapes"],
    )
    emb = getattr(emb, "pooler_output", emb)
    emb = torch.nn.functional.normalize(emb.float(), dim=-1)
if device == "cuda":
    print(
        f"embed {tuple(emb.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
