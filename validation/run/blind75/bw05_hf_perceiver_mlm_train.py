"""HF PerceiverForMaskedLM (byte-level inputs cross-attended into 256 latents, 26 self-attention
layers over the latents, a decoder cross-attention back to 2,048 positions) built from its config,
fp32, AdamW, batch 8 of 2,048 bytes, 2 steps; 3 phases."""

import os

import torch
from transformers import PerceiverConfig, PerceiverForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7505)
if SMALL:
    config = PerceiverConfig(
        num_latents=8,
        d_latents=32,
        d_model=16,
        num_blocks=1,
        num_self_attends_per_block=2,
        num_self_attention_heads=2,
        num_cross_attention_heads=2,
        vocab_size=262,
        max_position_embeddings=32,
    )
    B, L = 2, 32
else:
    config = PerceiverConfig(
        num_latents=256,
        d_latents=1280,
        d_model=768,
        num_blocks=1,
        num_self_attends_per_block=26,
        num_self_attention_heads=8,
        num_cross_attention_heads=8,
        vocab_size=262,
        max_position_embeddings=2048,
    )
    B, L = 8, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
model = PerceiverForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    labels = ids.clone()
    loss = model(inputs=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
