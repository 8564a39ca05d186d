"""HF GPTNeoForCausalLM (GPT-Neo-125M's shape: 12 layers, 768 wide, global and 256-token local
attention alternating) built from its config, fp32 weights trained under fp16 autocast with a
GradScaler, gradient clipping after unscaling, AdamW, batch 8 of 1,024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import GPTNeoConfig, GPTNeoForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8201)
if SMALL:
    config = GPTNeoConfig(
        vocab_size=128,
        max_position_embeddings=64,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],
        window_size=8,
        bos_token_id=1,
        eos_token_id=1,
    )
    B, L = 2, 16
else:
    config = GPTNeoConfig(
        vocab_size=50257,
        max_position_embeddings=2048,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        attention_types=[[["global", "local"], 6]],
        window_size=256,
    )
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTNeoForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
