"""HF LongformerForSequenceClassification from a LongformerConfig (768 wide, 12 layers, attention
window 512, global attention on the first token) fine-tuned on 4,096-token documents at batch 2
under bf16 autocast with AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import LongformerConfig, LongformerForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5901)
if SMALL:
    config = LongformerConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        attention_window=8,
        max_position_embeddings=80,
        num_labels=4,
    )
    B, L = 2, 64
else:
    config = LongformerConfig(
        vocab_size=50265,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=4098,
        num_labels=4,
    )
    B, L = 2, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LongformerForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(3, config.vocab_size, (B, L), device=device)
    glob = torch.zeros(B, L, dtype=torch.long, device=device)
    glob[:, 0] = 1
    labels = torch.randint(0, 4, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=ids, attention_mask=torch.ones_like(ids), global_attention_mask=glob, labels=labels
        )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, glob, labels, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
