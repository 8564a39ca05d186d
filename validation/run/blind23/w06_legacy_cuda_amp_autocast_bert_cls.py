"""HF BertForSequenceClassification from a BertConfig (768 wide, 12 layers, 3 labels) in fp32 under
the legacy torch.cuda.amp.autocast(dtype=torch.bfloat16), AdamW with a linear warm-up schedule,
clip_grad_norm_, batch 16 x 384 with the last 64 positions padded in the attention mask, 3 steps;
4 phases."""

import os
import warnings

import torch
from transformers import BertConfig, BertForSequenceClassification

warnings.filterwarnings("ignore", category=FutureWarning)
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2306)
if SMALL:
    config = BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=3,
    )
    B, T, PAD = 2, 16, 4
else:
    config = BertConfig(num_labels=3)
    B, T, PAD = 16, 384, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
mask = torch.ones(B, T, dtype=torch.long, device=device)
mask[:, T - PAD :] = 0
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    labels = torch.randint(0, 3, (B,), device=device)
    with torch.cuda.amp.autocast(enabled=device == "cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
