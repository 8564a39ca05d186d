"""Packed-sequence SFT as TRL packs it: each row of a batch holds several documents back to back,
position_ids restart at every document, no attention mask; HF LlamaForCausalLM from a small
LlamaConfig (1024 wide, 8 layers, 16 heads with 4 KV heads) in bf16, sdpa attention, batch 2 of
2048 tokens, labels -100 on each document's first token, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3101)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S, docs = 2, 32, [10, 14, 8]
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    B, S, docs = 2, 2048, [700, 900, 448]
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
position_ids = torch.cat([torch.arange(n) for n in docs]).unsqueeze(0).expand(B, S).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    labels = ids.masked_fill(position_ids == 0, -100)
    loss = model(input_ids=ids, position_ids=position_ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
