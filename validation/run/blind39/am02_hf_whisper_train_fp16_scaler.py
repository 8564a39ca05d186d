"""Speech-recognition fine-tuning: an HF WhisperForConditionalGeneration from config (whisper-base
sized: 512 wide, 6+6 layers, 80 mel bins, 3000 frames) in fp32 under fp16 autocast with a
GradScaler, AdamW (foreach), batch 8, 128 label tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3902)
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
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
    )
    B, FRAMES, T = 2, 32, 8
else:
    config = WhisperConfig(
        vocab_size=51865,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        num_mel_bins=80,
    )
    B, FRAMES, T = 8, 3000, 128
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = WhisperForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    features = torch.randn(B, config.num_mel_bins, FRAMES, device=device)
    labels = torch.randint(0, config.vocab_size, (B, T), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_features=features, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del features, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
