"""HF GPTNeoXForCausalLM from a GPTNeoXConfig (Pythia-410m-like: 1024 wide, 12 layers, 16 heads, partial rotary
0.25, parallel residual), bf16 weights, AdamW (foreach), labels=input_ids, batch 8 x 1024, 2 steps."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1701)
if SMALL:
    config = GPTNeoXConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    BATCH, SEQ = 2, 16
else:
    config = GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    )
    BATCH, SEQ = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTNeoXForCausalLM(config).to(device=device, dtype=torch.bfloat16).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
