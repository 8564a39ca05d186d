"""HF Qwen2ForCausalLM from a Qwen2Config (1,536 wide, 12 layers, 2 KV heads, 151k vocabulary) in
bf16 trained with the config's default use_cache: the whole output (logits and the DynamicCache the
forward built) is kept until after the optimizer step, batch 4 of 1,024 tokens, AdamW, 2 steps; 3
phases."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7103)
if SMALL:
    config = Qwen2Config(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    B, L = 2, 16
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids, use_cache=True)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
