"""HF GPTBigCodeForCausalLM (starcoder-like multi-query attention) built from its config, 20 layers,
1,536 wide, bf16 weights, trained with fused AdamW at batch 4 of 1,024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7401)
if SMALL:
    config = GPTBigCodeConfig(
        vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=True
    )
    B, L = 2, 16
else:
    config = GPTBigCodeConfig(
        vocab_size=49152, n_embd=1536, n_layer=20, n_head=16, n_positions=2048, multi_query=True
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTBigCodeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
