"""HF GPT2LMHeadModel from a GPT2Config (1024 wide, 12 layers, 16 heads) in fp32 with
gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True}) and
enable_input_require_grads(), AdamW (foreach default), batch 4 x 1024, 3 steps; 4 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2206)
if SMALL:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=4, n_positions=64)
    B, T = 2, 16
else:
    config = GPT2Config(n_embd=1024, n_layer=12, n_head=16)
    B, T = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.enable_input_require_grads()
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
