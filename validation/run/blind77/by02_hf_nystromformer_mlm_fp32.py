"""HF NystromformerForMaskedLM (Nystrom-approximated attention with 64 landmarks, an iterative
Moore-Penrose pseudo-inverse, a depthwise conv on values) built from its config, 12 layers, 768 wide,
fp32, AdamW, batch 8 of 2,048 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import NystromformerConfig, NystromformerForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7702)
if SMALL:
    config = NystromformerConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        segment_means_seq_len=32,
        num_landmarks=4,
        max_position_embeddings=40,
    )
    B, L = 2, 32
else:
    config = NystromformerConfig(
        vocab_size=30000,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        segment_means_seq_len=2048,
        num_landmarks=64,
        max_position_embeddings=2056,
    )
    B, L = 8, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
model = NystromformerForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
