"""Masked-LM pre-training with gradient accumulation: an HF BertForMaskedLM from config
(bert-base) in bf16, 4 micro-batches of 16 at 512 tokens per step with 15% of labels kept (the
rest -100), clip_grad_norm_ (foreach), AdamW with foreach=False, 2 steps; 3 phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4606)
if SMALL:
    config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, S = 2, 16
else:
    config = BertConfig()
    B, S = 16, 512
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForMaskedLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _ in range(4):
        ids = torch.randint(0, config.vocab_size, (B, S), device=device)
        labels = torch.where(torch.rand(B, S, device=device) < 0.15, ids, torch.full_like(ids, -100))
        loss = model(input_ids=ids, labels=labels).loss / 4
        loss.backward()
        del ids, labels, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
