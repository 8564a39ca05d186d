"""BERT masked-language-model pre-training with the collator's masking written out: 15% of tokens
chosen by bernoulli, 80% of those replaced by [MASK] and 10% by random tokens through boolean
index assignment, labels -100 elsewhere; an HF BertForMaskedLM from config (bert-base sized) in
fp32 under fp16 autocast with a GradScaler, AdamW (foreach), batch 32 at 512 tokens, 2 steps; 3
phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4101)
if SMALL:
    config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, S = 2, 16
else:
    config = BertConfig()
    B, S = 32, 512
config._attn_implementation = "sdpa"
MASK = 103 if not SMALL else 3
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, S), device=device)
    labels = ids.clone()
    chosen = torch.bernoulli(torch.full(ids.shape, 0.15, device=device)).bool()
    labels[~chosen] = -100
    replace = torch.bernoulli(torch.full(ids.shape, 0.8, device=device)).bool() & chosen
    ids[replace] = MASK
    randomize = torch.bernoulli(torch.full(ids.shape, 0.5, device=device)).bool() & chosen & ~replace
    ids[randomize] = torch.randint(5, config.vocab_size, ids.shape, device=device)[randomize]
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, chosen, replace, randomize, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
