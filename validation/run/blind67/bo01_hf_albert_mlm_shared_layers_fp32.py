"""HF AlbertForMaskedLM from an AlbertConfig (albert-large sizes: 24 layers sharing one set of weights,
1,024 wide, a 128-wide factorised embedding), masked-LM training on 512-token sequences at batch 8,
fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import AlbertConfig, AlbertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6701)
if SMALL:
    config = AlbertConfig(
        vocab_size=100,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    B, L = 2, 16
else:
    config = AlbertConfig(
        vocab_size=30000,
        embedding_size=128,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    )
    B, L = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = AlbertForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.where(torch.rand(B, L, device=device) < 0.15, ids, torch.full_like(ids, -100))
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
