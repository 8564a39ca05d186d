"""Pix2Struct (Lee et al. 2023): screenshot parsing from variable-resolution patches, random pages.

Model: transformers' Pix2StructForConditionalGeneration from a Pix2StructConfig at pix2struct-base's
shape (a 12-layer ViT encoder of 768 over 16 x 16 patches, a 12-layer decoder of 768, vocabulary
50,244). The "flattened patches" are built by hand as Pix2Struct's processor does: every page keeps its
aspect ratio and is rescaled so that rows x cols <= max_patches, its patches are flattened to
16 * 16 * 3 values and prefixed with their 1-based row and column ids, and the rest of the
max_patches slots are zero padding with attention_mask 0. Targets are random token sequences of 128.

Phases: the first step (bf16 autocast, HF Adafactor with a fixed learning rate, batch 8, 2,048
patches); 2 more steps; greedy `generate()` of exactly 32 tokens at batch 8; then 4,096 patches a page
with the model cast to bf16 (Pix2Struct has no gradient checkpointing in transformers) and a
foreach AdamW on the bf16 parameters at batch 4. 4 phases."""

import math
import os
import random

import torch
from transformers import Pix2StructConfig, Pix2StructForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2092)
rng = random.Random(2092)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
P = 16
if SMALL:
    D, LAYERS, HEADS, FF, VOCAB, PATCHES, TGT, BATCH = 64, 2, 4, 128, 1000, 256, 16, 2
else:
    D, LAYERS, HEADS, FF, VOCAB, PATCHES, TGT, BATCH = 768, 12, 12, 2048, 50244, 2048, 128, 8
PAD, EOS = 0, 1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = Pix2StructConfig(
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=D,
        d_kv=D // HEADS,
        d_ff=FF,
        num_layers=LAYERS,
        num_heads=HEADS,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
    ),
    vision_config=dict(
        hidden_size=D,
        patch_embed_hidden_size=P * P * 3,
        d_ff=FF,
        d_kv=D // HEADS,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        patch_size=P,
        seq_len=max(PATCHES * 2, 4096),
    ),
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
model = Pix2StructForConditionalGeneration(config).to(device)
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = EOS
model.generation_config.decoder_start_token_id = PAD
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def page(max_patches):
    """One page of random aspect ratio as Pix2Struct's processor flattens it (rows x cols <= max)."""
    h, w = rng.choice([(1280, 960), (960, 1280), (2048, 1024), (800, 1600), (1100, 850)])
    scale = math.sqrt(max_patches * (P / h) * (P / w))
    rows = max(min(math.floor(scale * h / P), max_patches), 1)
    cols = max(min(math.floor(scale * w / P), max_patches), 1)
    image = torch.rand(3, rows * P, cols * P, device=device)
    patches = image.unfold(1, P, P).unfold(2, P, P)  # (3, rows, cols, P, P)
    patches = patches.permute(1, 2, 3, 4, 0).reshape(rows * cols, P * P * 3)
    patches = (patches - patches.mean()) / patches.std().clamp_min(1.0 / math.sqrt(patches.numel()))
    row_ids = torch.arange(rows, device=device).repeat_interleave(cols).unsqueeze(1) + 1
    col_ids = torch.arange(cols, device=device).repeat(rows).unsqueeze(1) + 1
    flat = torch.zeros(max_patches, 2 + P * P * 3, device=device)
    flat[: rows * cols] = torch.cat([row_ids.float(), col_ids.float(), patches], dim=1)
    mask = torch.zeros(max_patches, device=device)
    mask[: rows * cols] = 1
    return flat, mask


def batch(n, max_patches):
    pages = [page(max_patches) for _ in range(n)]
    flat = torch.stack([p[0] for p in pages])
    mask = torch.stack([p[1] for p in pages])
    labels = torch.randint(2, VOCAB, (n, TGT), device=device)
    labels[:, -1] = EOS
    return flat, mask, labels


opt = Adafactor(model.parameters(), lr=1e-4, scale_parameter=False, relative_step=False, warmup_init=False)
model.train()
for step in range(3):
    flat, mask, labels = batch(BATCH, PATCHES)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(flattened_patches=flat, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
flat, mask, _ = batch(BATCH, PATCHES)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    out = model.generate(
        flattened_patches=flat, attention_mask=mask, max_new_tokens=32, min_new_tokens=32, do_sample=False
    )
print(f"generated {tuple(out.shape)}")
del out, flat, mask
report("generate")

del opt
# Pix2Struct has no gradient checkpointing in transformers: the model itself goes to bf16 instead
model.to(torch.bfloat16)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, foreach=True)
for step in range(2):
    flat, mask, labels = batch(BATCH // 2, 2 * PATCHES)
    loss = model(flattened_patches=flat.bfloat16(), attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"4096-patch pure bf16 step {step} loss {loss.item():.4f}")
report("4096 patches pure bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
