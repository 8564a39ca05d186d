"""HF BertForMaskedLM (bert-base-sized) built from its config, fp32, Adam with `capturable=True` (the
step counters kept on the GPU) and `clip_grad_norm_(foreach=False)`, batch 32 of 512 tokens with 15%
of the labels kept, 2 steps; 3 phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8004)
if SMALL:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = BertConfig()
    B, L = 32, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForMaskedLM(config).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.where(torch.rand(B, L, device=device) < 0.15, ids, torch.full_like(ids, -100))
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
