"""HF GPT2LMHeadModel from a GPT2Config (768 wide, 8 layers, 12 heads, context 1024), the loss computed
outside the model with label smoothing 0.1 over the shifted logits, fp32 weights under bf16 autocast,
AdamW(fused=True) with a cosine schedule and gradient clipping, batch 8 x 1024, 3 steps."""

import os

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, get_cosine_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1405)
if SMALL:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=2, n_positions=64)
    BATCH, SEQ = 2, 16
else:
    config = GPT2Config(n_embd=768, n_layer=8, n_head=12, n_positions=1024)
    BATCH, SEQ = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=device == "cuda")
scheduler = get_cosine_schedule_with_warmup(optimizer, 10, 1000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1),
                           label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
