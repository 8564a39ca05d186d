"""Donut (Kim et al. 2022): an OCR-free document parser trained on random page images.

Model: transformers' VisionEncoderDecoderModel built from configs only: a DonutSwin encoder at
Donut-base's shape (patch 4, embed 128, depths 2-2-14-2, heads 4-8-16-32, window 10) over
1280 x 960 pages, and an MBart decoder (4 layers of 1024, 16 heads, vocabulary 57,525 as Donut's
XLM-R sentencepiece, cross-attention to the 40 x 30 encoder grid). Targets are random token
sequences of 128 (a JSON-like parse), trained by teacher forcing through `labels=`.

Phases: the first optimizer step (bf16 autocast, fused AdamW, batch 4); 2 more steps; greedy
`generate()` of exactly 48 tokens at batch 4 (min_new_tokens = max_new_tokens); then
`gradient_checkpointing_enable()` (non-reentrant) under fp16 autocast with GradScaler and a
foreach Adam at batch 6. 4 phases."""

import os

import torch
from transformers import (
    DonutSwinConfig,
    MBartConfig,
    VisionEncoderDecoderConfig,
    VisionEncoderDecoderModel,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2091)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    H, W, DEPTHS, EMBED, VOCAB, DEC_LAYERS, D, TGT, BATCH = 320, 256, [1, 1, 2, 1], 32, 1000, 2, 128, 16, 2
    WINDOW = 5
else:
    H, W, DEPTHS, EMBED, VOCAB, DEC_LAYERS, D, TGT, BATCH = (
        1280,
        960,
        [2, 2, 14, 2],
        128,
        57525,
        4,
        1024,
        128,
        4,
    )
    WINDOW = 10
PAD, BOS, EOS = 1, 0, 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


encoder_cfg = DonutSwinConfig(
    image_size=[H, W],
    patch_size=4,
    num_channels=3,
    embed_dim=EMBED,
    depths=DEPTHS,
    num_heads=[4, 8, 16, 32],
    window_size=WINDOW,
    drop_path_rate=0.0,
)
decoder_cfg = MBartConfig(
    vocab_size=VOCAB,
    d_model=D,
    decoder_layers=DEC_LAYERS,
    decoder_attention_heads=16,
    decoder_ffn_dim=4 * D,
    encoder_layers=DEC_LAYERS,
    max_position_embeddings=512,
    scale_embedding=True,
    add_final_layer_norm=True,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)
config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder_cfg, decoder_cfg)
config.decoder_start_token_id = BOS
config.pad_token_id = PAD
config.eos_token_id = EOS
model = VisionEncoderDecoderModel(config=config).to(device)
model.generation_config.decoder_start_token_id = BOS
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = EOS
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def batch(n):
    pixels = torch.randn(n, 3, H, W, device=device)
    labels = torch.randint(3, VOCAB, (n, TGT), device=device)
    labels[:, -1] = EOS
    return pixels, labels


opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=amp)
model.train()
for step in range(3):
    pixels, labels = batch(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
pixels, _ = batch(BATCH)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    out = model.generate(
        pixel_values=pixels, max_new_tokens=48, min_new_tokens=48, do_sample=False, num_beams=1
    )
print(f"generated {tuple(out.shape)}")
del out, pixels
report("generate")

del opt
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.Adam(model.parameters(), lr=5e-5, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(2):
    pixels, labels = batch(BATCH + BATCH // 2)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = model(pixel_values=pixels, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 checkpointed step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("fp16 checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
