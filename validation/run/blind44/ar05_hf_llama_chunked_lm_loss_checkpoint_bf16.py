"""Memory-saving LM loss written by hand: an HF LlamaModel from config (2048 wide, 8 layers, 128k
vocabulary head kept separately) in bf16, the lm_head and cross entropy computed over 8 sequence
chunks, each chunk under non-reentrant torch.utils.checkpoint so no full logits tensor is kept,
AdamW (foreach), batch 4 at 2048 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import LlamaConfig, LlamaModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4405)
if SMALL:
    config = LlamaConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, S = 2, 32
else:
    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, S = 4, 2048
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
body = LlamaModel(config).to(device=device, dtype=torch.bfloat16)
head = nn.Linear(config.hidden_size, config.vocab_size, bias=False).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW([*body.parameters(), *head.parameters()], lr=1e-4)


def chunk_loss(h, labels):
    return F.cross_entropy(head(h).float(), labels, reduction="sum")


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    hidden = body(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, config.hidden_size)
    labels = ids[:, 1:].reshape(-1)
    total = 0
    for h, lab in zip(hidden.chunk(8), labels.chunk(8), strict=True):
        total = total + checkpoint(chunk_loss, h, lab, use_reentrant=False)
    loss = total / labels.numel()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, hidden, labels, total, loss, h, lab
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
