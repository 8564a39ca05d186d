"""HF BartForConditionalGeneration from a BartConfig (bart-base sizes: 768 wide, 6+6 layers),
fp16, beam search (4 beams) for exactly 48 new tokens after source texts of 256 tokens at batch 8,
then batch 16; the encoder-decoder cache with cross-attention keys reordered between beams; 3 phases."""

import os

import torch
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2605)
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
    SIZES, S, NEW = (2, 3), 16, 4
else:
    config = BartConfig()
    SIZES, S, NEW = (8, 16), 256, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = BartForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b in SIZES:
    ids = torch.randint(4, config.vocab_size, (b, S), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, num_beams=4, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
        )
    del ids, out
    if device == "cuda":
        print(f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
