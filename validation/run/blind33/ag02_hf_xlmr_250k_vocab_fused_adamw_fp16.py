"""HF XLMRobertaForSequenceClassification with XLM-R's 250,002-token vocabulary (768 wide, 6
layers, 12 heads), fp32 weights under fp16 autocast with a GradScaler, sdpa attention, 3 labels,
batch 32 at 256 tokens with padding masks, AdamW (fused), 2 steps; 3 phases."""

import os

import torch
from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3302)
if SMALL:
    config = XLMRobertaConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    B, S = 2, 16
else:
    config = XLMRobertaConfig(
        vocab_size=250002,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=514,
    )
    B, S = 32, 256
config.num_labels = 3
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = XLMRobertaForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=device == "cuda")
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
lengths = torch.linspace(S // 4, S, B).long()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = (torch.randint(3, config.vocab_size, (B, S)) * mask + (1 - mask)).to(device)
    mask = mask.to(device)
    labels = torch.randint(0, 3, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del ids, mask, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
