"""HF MoonshineForConditionalGeneration (Moonshine-base-like: a conv front end over raw 16 kHz audio,
8 encoder and 8 decoder layers, 416 wide, partial rotary, 32,768 vocab) built from its config in
fp16 weights transcribing a batch of 16 right-padded clips of 4 to 12 s with an attention mask,
greedy decoding of exactly 96 tokens; then 4 clips of 20 s with 4 beams, 64 tokens; 2 phases."""

import os

import torch
from transformers import MoonshineConfig, MoonshineForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8801)
if SMALL:
    config = MoonshineConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1,
        encoder_num_attention_heads=2,
        decoder_num_attention_heads=2,
        encoder_num_key_value_heads=2,
        decoder_num_key_value_heads=2,
    )
    CASES = ((3, 4000, 12000, 1, 6), (2, 8000, 8000, 2, 4))
else:
    config = MoonshineConfig(
        hidden_size=416,
        intermediate_size=1664,
        encoder_num_hidden_layers=8,
        decoder_num_hidden_layers=8,
        max_position_embeddings=4096,
    )
    CASES = ((16, 64000, 192000, 1, 96), (4, 320000, 320000, 4, 64))
config.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = MoonshineForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for b, shortest, longest, beams, new in CASES:
    lengths = torch.randint(shortest, longest + 1, (b,))
    lengths[0] = longest
    audio = torch.randn(b, longest) * 0.1
    mask = torch.arange(longest)[None] < lengths[:, None]
    audio = (audio * mask).to(device=device, dtype=dtype)
    with torch.inference_mode():
        out = model.generate(
            input_values=audio,
            attention_mask=mask.long().to(device),
            num_beams=beams,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
    if device == "cuda":
        print(
            f"{b} clips beams {beams} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del audio, mask, out
