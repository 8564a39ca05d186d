"""An HF Qwen2ForCausalLM from config with eager attention (the attention matrix materialised,
softmax in fp32), fp32 weights under bf16 autocast, AdamW (foreach), 1024 wide, 8 layers, 16 heads
with 2 KV heads, batch 4 at 512 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4002)
if SMALL:
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S = 2, 16
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=2,
    )
    B, S = 4, 512
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2ForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
