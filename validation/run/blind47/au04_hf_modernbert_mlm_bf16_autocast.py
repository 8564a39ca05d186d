"""ModernBERT masked-LM training from a config: 12 layers with alternating global and 128-token local
(sliding-window) attention, seq 1024 at batch 8, 15% of the labels kept, bf16 autocast over fp32
weights, AdamW (foreach), gradient clipping, 2 steps; 3 phases."""

import os

import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4704)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    size = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2)
    B, L = 2, 64
else:
    size = dict(hidden_size=768, intermediate_size=1152, num_hidden_layers=12, num_attention_heads=12)
    B, L = 8, 1024
config = ModernBertConfig(vocab_size=50368, max_position_embeddings=L, local_attention=128, **size)
config._attn_implementation = "sdpa"
model = ModernBertForMaskedLM(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, 50368, (B, L), device=device)
    labels = ids.masked_fill(torch.rand(B, L, device=device) > 0.15, -100)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
