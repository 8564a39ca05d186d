"""HF MarianMTModel (opus-mt-like: 6+6 layers, 512 wide, 58,101 vocab, sinusoidal positions, shared
embeddings) in fp16 weights: beam search with 5 beams at batch 8 over 128-token sources, exactly 48
new tokens; then 4 returned sequences each from 4 beams at batch 4 with a length penalty; 2 phases."""

import os

import torch
from transformers import MarianConfig, MarianMTModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7406)
if SMALL:
    config = MarianConfig(
        vocab_size=96,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=95,
        decoder_start_token_id=95,
        eos_token_id=0,
    )
    SRC, NEW = 12, 4
else:
    config = MarianConfig(
        vocab_size=58101,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_position_embeddings=512,
        pad_token_id=58100,
        decoder_start_token_id=58100,
        eos_token_id=0,
    )
    SRC, NEW = 128, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
model = (
    MarianMTModel(config).to(device=device, dtype=torch.float16 if device == "cuda" else torch.float32).eval()
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
src = torch.randint(1, config.vocab_size - 1, (8, SRC), device=device)
out = model.generate(input_ids=src, num_beams=5, max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=None)
if device == "cuda":
    print(f"beams peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
out = model.generate(
    input_ids=src[:4],
    num_beams=4,
    num_return_sequences=4,
    length_penalty=0.6,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    eos_token_id=None,
)
if device == "cuda":
    print(f"returns peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
