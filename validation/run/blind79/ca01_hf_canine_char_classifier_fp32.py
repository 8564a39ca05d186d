"""HF CanineForSequenceClassification (character-level: hashed codepoint embeddings, a local-attention
layer, a strided conv1d downsampling by 4, a 12-layer deep transformer, an upsampling conv over the
concatenation) built from its config, fp32, AdamW, batch 16 of 2,048 characters, 2 steps; 3 phases."""

import os

import torch
from transformers import CanineConfig, CanineForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7901)
if SMALL:
    config = CanineConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=3,
        local_transformer_stride=8,
    )
    B, L = 2, 32
else:
    config = CanineConfig(max_position_embeddings=2048, num_labels=5)
    B, L = 16, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CanineForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(32, 0x2FFF, (B, L), device=device)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
