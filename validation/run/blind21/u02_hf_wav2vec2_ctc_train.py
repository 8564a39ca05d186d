"""HF Wav2Vec2ForCTC from a Wav2Vec2Config (the base model's convolutional feature encoder with group
norm, 512 wide, 6 layers, 8 heads, SpecAugment time masking at its default probability), fp32, AdamW,
batch 4 of 4 s of 16 kHz audio (no attention mask) with 60-token transcripts, 3 steps; 4 phases."""

import os

import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2102)
if SMALL:
    config = Wav2Vec2Config(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=4,
    )
    B, SAMPLES, LABELS = 2, 4000, 5
else:
    config = Wav2Vec2Config(
        vocab_size=32,
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        intermediate_size=2048,
    )
    B, SAMPLES, LABELS = 4, 64000, 60
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Wav2Vec2ForCTC(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    audio = torch.randn(B, SAMPLES, device=device)
    labels = torch.randint(1, config.vocab_size, (B, LABELS), device=device)
    loss = model(input_values=audio, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
