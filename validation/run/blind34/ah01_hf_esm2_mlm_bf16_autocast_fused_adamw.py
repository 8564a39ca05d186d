"""Protein language-model pretraining as the ESM-2 recipe runs it: an HF EsmForMaskedLM (640 wide,
12 layers, 20 heads, rotary positions, 33-token vocabulary) in fp32 weights under bf16 autocast,
15% of positions masked by a random draw on the GPU, cross-entropy over the masked positions only
(labels -100 elsewhere); sdpa attention, AdamW (fused), batch 16 at 1024 residues, 2 steps; 3 phases."""

import os

import torch
from transformers import EsmConfig, EsmForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3401)
if SMALL:
    config = EsmConfig(
        vocab_size=33,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, S = 2, 16
else:
    config = EsmConfig(
        vocab_size=33,
        hidden_size=640,
        intermediate_size=2560,
        num_hidden_layers=12,
        num_attention_heads=20,
        max_position_embeddings=1026,
    )
    B, S = 16, 1024
config.position_embedding_type = "rotary"
config.pad_token_id = 1
config.mask_token_id = 32
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = EsmForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(4, 24, (B, S), device=device)
    masked = torch.rand(B, S, device=device) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    ids = ids.masked_fill(masked, config.mask_token_id)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, masked, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
