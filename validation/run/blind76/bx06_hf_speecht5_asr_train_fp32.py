"""HF SpeechT5ForSpeechToText (a wav2vec2-style conv feature encoder, a 12-layer encoder with
relative position bias, a 6-layer text decoder) built from its config, fp32, AdamW, batch 4 of
10-second 16 kHz waveforms with 96-token targets, 2 steps; 3 phases."""

import os

import torch
from transformers import SpeechT5Config, SpeechT5ForSpeechToText

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7606)
if SMALL:
    config = SpeechT5Config(
        vocab_size=40,
        hidden_size=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        speech_decoder_prenet_units=16,
    )
    B, T, L = 2, 1600, 8
else:
    config = SpeechT5Config(vocab_size=81)
    B, T, L = 4, 160000, 96
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SpeechT5ForSpeechToText(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    audio = torch.randn(B, T, device=device)
    labels = torch.randint(4, config.vocab_size, (B, L), device=device)
    loss = model(input_values=audio, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del audio, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
