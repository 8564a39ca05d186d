"""HF PhiForCausalLM from a PhiConfig (phi-2's shape scaled down: 1280 wide, 12 layers, 16 heads of 80,
partial_rotary_factor 0.4, parallel attention and MLP, LayerNorm, gelu_new, 51,200 vocabulary), fp32
weights under bf16 autocast, AdamW (foreach default) with a linear warmup scheduler, batch 4 at 1024
tokens, 2 steps."""

import os

import torch
from transformers import PhiConfig, PhiForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1804)
if SMALL:
    config = PhiConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        partial_rotary_factor=0.5,
        max_position_embeddings=128,
    )
    BATCH, SEQ = 2, 16
else:
    config = PhiConfig(
        vocab_size=51200,
        hidden_size=1280,
        intermediate_size=5120,
        num_hidden_layers=12,
        num_attention_heads=16,
        partial_rotary_factor=0.4,
        max_position_embeddings=2048,
    )
    BATCH, SEQ = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = PhiForCausalLM(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
