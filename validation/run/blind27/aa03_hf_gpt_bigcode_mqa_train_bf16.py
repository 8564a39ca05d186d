"""HF GPTBigCodeForCausalLM (multi-query attention: one key/value head) from a small
GPTBigCodeConfig (1024 wide, 8 layers, 16 heads), bf16 weights, sdpa attention, batch 4 at 2048
tokens, fused AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2703)
if SMALL:
    config = GPTBigCodeConfig(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    B, S = 2, 16
else:
    config = GPTBigCodeConfig(vocab_size=49152, n_embd=1024, n_layer=8, n_head=16, n_positions=2048)
    B, S = 4, 2048
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTBigCodeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
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
