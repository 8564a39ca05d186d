"""HF GraniteForCausalLM (embedding, residual, attention and logit multipliers) from a small
GraniteConfig (1024 wide, 8 layers, 16 heads with 8 KV heads, tied embeddings), bf16 weights, sdpa
attention, batch 4 at 1024 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import GraniteConfig, GraniteForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2901)
if SMALL:
    config = GraniteConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    B, S = 2, 16
else:
    config = GraniteConfig(
        vocab_size=49152,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        tie_word_embeddings=True,
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        attention_multiplier=0.015625,
        logits_scaling=8.0,
    )
    B, S = 4, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GraniteForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
