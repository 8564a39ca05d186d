"""HF LEDForConditionalGeneration from an LEDConfig (led-base sizes: 768 wide, 6+6 layers, local
attention windows of 1,024 in the encoder, global attention on the first token), fine-tuned on
4,096-token documents with 256-token summaries at batch 2, bf16 weights, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import LEDConfig, LEDForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6604)
if SMALL:
    config = LEDConfig(
        vocab_size=100,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        attention_window=8,
        max_encoder_position_embeddings=64,
        max_decoder_position_embeddings=32,
    )
    B, S, T = 2, 32, 8
else:
    config = LEDConfig(
        vocab_size=50265,
        attention_window=1024,
        max_encoder_position_embeddings=4096,
        max_decoder_position_embeddings=1024,
    )
    B, S, T = 2, 4096, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LEDForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, S), device=device)
    glob = torch.zeros(B, S, dtype=torch.long, device=device)
    glob[:, 0] = 1
    labels = torch.randint(5, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, global_attention_mask=glob, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, glob, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
