"""HF T5ForConditionalGeneration (relative position buckets, gated-GELU FFN as in t5 v1.1) from a
small T5Config (768 wide, 6+6 layers, 12 heads), fp32, gradient checkpointing
(use_reentrant=False), transformers' Adafactor (relative step, factored second moments), batch 16,
source 512 and target 128 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3103)
if SMALL:
    config = T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4, feed_forward_proj="gated-gelu"
    )
    B, S, T = 2, 16, 8
else:
    config = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=2048,
        num_layers=6,
        num_heads=12,
        feed_forward_proj="gated-gelu",
    )
    B, S, T = 16, 512, 128
config.decoder_start_token_id = 0
config.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
model = T5ForConditionalGeneration(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
optimizer = Adafactor(model.parameters(), lr=None, relative_step=True, scale_parameter=True, warmup_init=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(1, config.vocab_size, (B, S), device=device)
    tgt = torch.randint(1, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
