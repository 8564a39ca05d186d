"""HF Starcoder2ForCausalLM (LayerNorm, GELU MLP with biases, GQA, sliding window off) from a small
Starcoder2Config (1024 wide, 6 layers, 16 heads with 4 KV heads), fp32 weights under bf16
autocast, sdpa attention, batch 4 at 1024 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import Starcoder2Config, Starcoder2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3001)
if SMALL:
    config = Starcoder2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S = 2, 16
else:
    config = Starcoder2Config(
        vocab_size=49152,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=4,
        sliding_window=None,
    )
    B, S = 4, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Starcoder2ForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
