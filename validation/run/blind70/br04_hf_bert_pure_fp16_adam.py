"""HF BertForSequenceClassification from a BertConfig (bert-base sizes) converted wholly to fp16
(model.half(), no autocast, no scaler, no master weights), 512-token sequences at batch 32, Adam with
eps 1e-4, 2 steps; 3 phases."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7004)
if SMALL:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
    )
    B, L = 2, 16
else:
    config = BertConfig(num_labels=3)
    B, L = 32, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config).to(device)
if device == "cuda":
    model = model.half()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-5, eps=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.randint(0, 3, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
