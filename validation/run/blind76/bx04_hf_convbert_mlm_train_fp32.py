"""HF ConvBertForMaskedLM (ConvBERT-base-like: span-based dynamic convolution heads beside
self-attention, head ratio 2, grouped feed-forward) built from its config, fp32, AdamW, batch 16 of
512 tokens with 15% of the labels kept, 2 steps; 3 phases."""

import os

import torch
from transformers import ConvBertConfig, ConvBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7604)
if SMALL:
    config = ConvBertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        embedding_size=32,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = ConvBertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        embedding_size=768,
        max_position_embeddings=512,
        head_ratio=2,
        conv_kernel_size=9,
        num_groups=1,
    )
    B, L = 16, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ConvBertForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.where(torch.rand(B, L, device=device) < 0.15, ids, torch.full_like(ids, -100))
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
