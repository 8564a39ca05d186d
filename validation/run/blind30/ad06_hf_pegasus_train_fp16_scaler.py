"""HF PegasusForConditionalGeneration (sinusoidal positions, pre-LayerNorm encoder-decoder) from a
small PegasusConfig (768 wide, 4+4 layers, 12 heads), fp32 weights under fp16 autocast with a
GradScaler, sdpa attention, batch 8, source 512 and target 128 tokens, AdamW (foreach), 2 steps;
3 phases."""

import os

import torch
from transformers import PegasusConfig, PegasusForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3006)
if SMALL:
    config = PegasusConfig(
        vocab_size=128,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    B, S, T = 2, 16, 8
else:
    config = PegasusConfig(
        vocab_size=96103,
        d_model=768,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=1024,
    )
    B, S, T = 8, 512, 128
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = PegasusForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(1, config.vocab_size, (B, S), device=device)
    tgt = torch.randint(1, config.vocab_size, (B, T), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
