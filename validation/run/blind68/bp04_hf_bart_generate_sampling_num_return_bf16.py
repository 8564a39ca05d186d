"""HF BartForConditionalGeneration from a BartConfig (bart-large sizes: 12+12 layers, 1,024 wide) in
bf16 sampling 4 sequences per source (num_return_sequences=4, top_p 0.9), 4 sources of 1,024 tokens,
exactly 128 new tokens each; 2 phases."""

import os

import torch
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6804)
if SMALL:
    config = BartConfig(
        vocab_size=100,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    B, L, T = 2, 16, 4
else:
    config = BartConfig(
        vocab_size=50265,
        d_model=1024,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
    )
    B, L, T = 4, 1024, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BartForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(4, config.vocab_size, (B, L), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    do_sample=True,
    top_p=0.9,
    top_k=0,
    num_return_sequences=4,
    max_new_tokens=T,
    min_new_tokens=T,
    num_beams=1,
)
print(f"generated {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
