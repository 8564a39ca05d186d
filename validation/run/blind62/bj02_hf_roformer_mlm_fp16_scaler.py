"""HF RoFormerForMaskedLM from a RoFormerConfig (768 wide, 12 layers, rotary position embeddings
applied inside each attention), masked-LM training on 1,024-token sequences at batch 8 (15% of the
tokens chosen by bernoulli, labels -100 elsewhere) with fp32 weights under fp16 autocast and a
GradScaler, AdamW, 3 steps; 4 phases."""

import os

import torch
from transformers import RoFormerConfig, RoFormerForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6202)
if SMALL:
    config = RoFormerConfig(
        vocab_size=100,
        embedding_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = RoFormerConfig(vocab_size=50000, max_position_embeddings=1024)
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = RoFormerForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    chosen = torch.bernoulli(torch.full((B, L), 0.15, device=device)).bool()
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = torch.where(chosen, torch.full_like(ids, 4), ids)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=inputs, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del ids, chosen, labels, inputs, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
