"""HF Speech2TextForConditionalGeneration (s2t-small-like: a two-conv subsampler over 80 filterbanks,
12+6 layers, 256 wide, 10,000 vocab) in fp16 weights transcribing 8 utterances of 12 s (1,200 frames)
with 4 beams, exactly 64 new tokens; then greedy decoding of 16 utterances of 8 s; 2 phases."""

import os

import torch
from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8304)
if SMALL:
    config = Speech2TextConfig(
        vocab_size=64,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        conv_channels=32,
        input_feat_per_channel=80,
        max_source_positions=200,
        max_target_positions=64,
    )
    T1, T2, NEW = 40, 24, 4
else:
    config = Speech2TextConfig(
        vocab_size=10000,
        d_model=256,
        encoder_layers=12,
        decoder_layers=6,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        conv_channels=1024,
        input_feat_per_channel=80,
        max_source_positions=6000,
        max_target_positions=1024,
    )
    T1, T2, NEW = 1200, 800, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = Speech2TextForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
feats = torch.randn(8, T1, 80, device=device, dtype=dtype)
mask = torch.ones(8, T1, dtype=torch.long, device=device)
out = model.generate(
    input_features=feats,
    attention_mask=mask,
    num_beams=4,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    eos_token_id=None,
)
if device == "cuda":
    print(f"beams peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
feats = torch.randn(16, T2, 80, device=device, dtype=dtype)
out = model.generate(
    input_features=feats, max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=None, do_sample=False
)
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
