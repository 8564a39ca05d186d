"""HF WhisperForConditionalGeneration from a WhisperConfig (whisper-base sized: 512 wide, 6+6 layers,
80 mel bins, 3000 frames through two Conv1d), labels of 128 tokens, fp32 weights under bf16 autocast,
AdamW (foreach), batch 16, 3 steps."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1004)
if SMALL:
    config = WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=500, max_source_positions=50, max_target_positions=64,
                           pad_token_id=1, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2)
    BATCH, FRAMES, LABELS = 2, 100, 16
else:
    config = WhisperConfig(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
                           encoder_ffn_dim=2048, decoder_ffn_dim=2048)
    BATCH, FRAMES, LABELS = 16, 3000, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = WhisperForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    features = torch.randn(BATCH, config.num_mel_bins, FRAMES, device=device)
    labels = torch.randint(0, config.vocab_size, (BATCH, LABELS), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_features=features, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
