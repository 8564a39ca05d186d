"""HF BertForMaskedLM from a BertConfig (BERT-base sized, vocabulary 30,522) trained with dynamic
masking written by hand: 15% of tokens chosen by `torch.bernoulli`, 80% of those replaced by
[MASK] and 10% by random tokens through `masked_fill`/`torch.where`, labels -100 elsewhere;
batch 32 x 512, bf16 autocast, AdamW (fused), 2 steps; 3 phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5603)
if SMALL:
    config = BertConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    BATCH, SEQ = 2, 16
else:
    config = BertConfig()
    BATCH, SEQ = 32, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
MASK = 103 if not SMALL else 3
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1000 if not SMALL else 10, config.vocab_size, (BATCH, SEQ), device=device)
    chosen = torch.bernoulli(torch.full(ids.shape, 0.15, device=device)).bool()
    labels = ids.masked_fill(~chosen, -100)
    replace = torch.bernoulli(torch.full(ids.shape, 0.8, device=device)).bool() & chosen
    randomise = torch.bernoulli(torch.full(ids.shape, 0.5, device=device)).bool() & chosen & ~replace
    inputs = ids.masked_fill(replace, MASK)
    inputs = torch.where(randomise, torch.randint_like(ids, config.vocab_size), inputs)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=inputs, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, chosen, labels, replace, randomise, inputs, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
