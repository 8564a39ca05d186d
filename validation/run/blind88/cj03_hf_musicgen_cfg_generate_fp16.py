"""HF MusicgenForConditionalGeneration (MusicGen-small-like: a T5-base text encoder, a 24-layer
1,024-wide decoder over 4 EnCodec codebooks with the delay pattern, a 32 kHz EnCodec audio
decoder) built from its configs in fp16 weights: text-conditioned sampling with classifier-free
guidance (scale 3, the batch doubled), 4 prompts of 24 tokens, 250 new frames (5 s of audio),
decoded to waveforms; then 2 prompts, 150 frames; 2 phases."""

import os

import torch
from transformers import (
    EncodecConfig,
    MusicgenConfig,
    MusicgenDecoderConfig,
    MusicgenForConditionalGeneration,
    T5Config,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8803)
if SMALL:
    text = T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    audio = EncodecConfig(
        sampling_rate=8000,
        hidden_size=16,
        num_filters=4,
        upsampling_ratios=[4, 4],
        codebook_size=32,
        codebook_dim=16,
        target_bandwidths=[10.0],
        num_lstm_layers=1,
    )
    decoder = MusicgenDecoderConfig(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        num_codebooks=4,
        max_position_embeddings=256,
    )
    PROMPT, N1, N2 = 6, 12, 8
else:
    text = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    audio = EncodecConfig(
        sampling_rate=32000,
        hidden_size=128,
        num_filters=64,
        upsampling_ratios=[8, 5, 4, 4],
        codebook_size=2048,
        codebook_dim=128,
        target_bandwidths=[2.2],
        num_lstm_layers=2,
        normalize=False,
    )
    decoder = MusicgenDecoderConfig(
        vocab_size=2048,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        ffn_dim=4096,
        num_codebooks=4,
        max_position_embeddings=2048,
    )
    PROMPT, N1, N2 = 24, 250, 150
config = MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict())
config.decoder_start_token_id = config.pad_token_id = decoder.vocab_size
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = MusicgenForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
model.generation_config.decoder_start_token_id = decoder.vocab_size
model.generation_config.pad_token_id = decoder.vocab_size
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for b, new in ((4, N1), (2, N2)):
    ids = torch.randint(1, text.vocab_size, (b, PROMPT), device=device)
    with torch.inference_mode():
        wave = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=250,
            guidance_scale=3.0,
            max_new_tokens=new,
        )
    if device == "cuda":
        print(
            f"{b} prompts wave {tuple(wave.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, wave
