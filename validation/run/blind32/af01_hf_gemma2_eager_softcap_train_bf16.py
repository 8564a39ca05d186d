"""HF Gemma2ForCausalLM trained the way its model card asks (eager attention, for the attention
logit soft-capping), from a small Gemma2Config (1024 wide, 6 layers alternating sliding-window 512
and global attention, 8 heads with 4 KV heads, final logit soft-capping), bf16, batch 2 at 1024
tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3201)
if SMALL:
    config = Gemma2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=8,
    )
    B, S = 2, 16
else:
    config = Gemma2Config(
        vocab_size=65536,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        sliding_window=512,
    )
    B, S = 2, 1024
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Gemma2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
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
