"""Summarisation-style inference: an HF BartForConditionalGeneration from config (bart-base
sized) in fp16, beam search with 4 beams over batch 4 of 512-token inputs, exactly 64 new
tokens; 2 phases (load, generate)."""

import os

import torch
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3704)
if SMALL:
    config = BartConfig(
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
    B, S, N = 2, 16, 4
else:
    config = BartConfig(
        vocab_size=50265,
        d_model=768,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=1024,
    )
    B, S, N = 4, 512, 64
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = BartForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(4, config.vocab_size, (B, S), device=device)
mask = torch.ones_like(ids)
out = model.generate(
    input_ids=ids, attention_mask=mask, num_beams=4, max_new_tokens=N, min_new_tokens=N, do_sample=False
)
if device == "cuda":
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
    print(f"generate {tuple(out.shape)} peak {peak} reserved {reserved}")
