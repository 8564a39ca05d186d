"""Full fine-tuning of an HF MistralForCausalLM from config in bf16 whose sliding window (512) is
shorter than the sequence (1024), so sdpa gets a materialised mask: 1536 wide, 8 layers, 12 heads
with 4 KV heads, batch 4, gradient clipping (foreach), AdamW (foreach) with OneCycleLR, 2 steps;
3 phases."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3701)
if SMALL:
    config = MistralConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
    )
    B, S = 2, 16
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        sliding_window=512,
    )
    B, S = 4, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
