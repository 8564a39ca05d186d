"""HF WhisperForConditionalGeneration from a small WhisperConfig (512 wide, 4+4 layers, 8 heads,
80 mel bins, 1500 audio positions) in fp16, sdpa attention: greedy generate() of 48 tokens for a
batch of 8 thirty-second log-mel inputs, decoder prompt of the start token only; 2 phases (load,
generate)."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3102)
if SMALL:
    config = WhisperConfig(
        vocab_size=128,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=32,
        decoder_start_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
    )
    B, N = 2, 4
else:
    config = WhisperConfig(
        vocab_size=51865,
        d_model=512,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=50258,
        pad_token_id=50257,
        eos_token_id=50257,
        bos_token_id=50257,
    )
    B, N = 8, 48
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = WhisperForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
feats = torch.randn(B, config.num_mel_bins, 2 * config.max_source_positions, device=device, dtype=dtype)
with torch.no_grad():
    out = model.generate(
        input_features=feats,
        decoder_input_ids=torch.full((B, 1), config.decoder_start_token_id, device=device),
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
    )
print(tuple(out.shape))
del out, feats
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
