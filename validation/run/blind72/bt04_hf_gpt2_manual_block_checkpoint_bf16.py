"""HF GPT2LMHeadModel from a GPT2Config (gpt2-medium sizes: 24 layers, 1,024 wide) in bf16, its blocks
run by the script's own loop, each under torch.utils.checkpoint (non-reentrant), 1,024-token sequences
at batch 8, the LM head and loss by hand, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7204)
if SMALL:
    config = GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    B, L = 2, 16
else:
    config = GPT2Config(n_embd=1024, n_layer=24, n_head=16)
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
tr = model.transformer


def run_block(block, x):
    out = block(x)
    return out[0] if isinstance(out, tuple) else out


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    pos = torch.arange(L, device=device).unsqueeze(0)
    h = tr.drop(tr.wte(ids) + tr.wpe(pos))
    for block in tr.h:
        h = checkpoint(run_block, block, h, use_reentrant=False)
    logits = model.lm_head(tr.ln_f(h)).float()
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, pos, h, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
