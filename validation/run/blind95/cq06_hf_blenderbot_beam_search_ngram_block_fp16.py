"""HF transformers Blenderbot (pre-norm encoder-decoder: 2 encoder and 12 decoder layers, 1,280 wide,
20 heads, an 8,008 vocabulary, 128 learned positions) built from its config in fp16; beam-search
replies (4 beams, length penalty 0.65, no_repeat_ngram_size 3, 20 to 60 tokens) for a batch of 16
dialogue contexts of 96 to 128 tokens padded with an attention mask, then 8 beams returning 4
sequences each for 4 contexts; 3 phases."""

import os

import torch
from transformers import BlenderbotConfig, BlenderbotForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9506)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
if SMALL:
    cfg = BlenderbotConfig(
        vocab_size=128,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        **TOKENS,
    )
    RUNS, LO, HI, MIN, MAX = ((3, 4, 1), (2, 6, 3)), 12, 20, 4, 10
else:
    cfg = BlenderbotConfig(
        vocab_size=8008,
        d_model=1280,
        encoder_layers=2,
        decoder_layers=12,
        encoder_attention_heads=20,
        decoder_attention_heads=20,
        encoder_ffn_dim=5120,
        decoder_ffn_dim=5120,
        max_position_embeddings=128,
        **TOKENS,
    )
    RUNS, LO, HI, MIN, MAX = ((16, 4, 1), (4, 8, 4)), 96, 128, 20, 60
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = BlenderbotForConditionalGeneration(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for B, beams, R in RUNS:
    lengths = torch.randint(LO, HI + 1, (B,)).tolist()
    ids = torch.zeros(B, max(lengths), dtype=torch.long, device=device)
    attn = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, cfg.vocab_size, (n,), device=device)
        ids[i, n - 1] = 2
        attn[i, :n] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            num_beams=beams,
            num_return_sequences=R,
            length_penalty=0.65,
            no_repeat_ngram_size=3,
            min_length=MIN,
            max_length=MAX,
            early_stopping=True,
        )
    if device == "cuda":
        print(
            f"batch {B} beams {beams} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, out
