"""HF MT5ForConditionalGeneration from an MT5Config (mt5-small sizes: 8+8 layers, 512 wide, gated-GELU,
a 250k untied vocabulary), bf16 weights, sources of 512 and targets of 128 tokens at batch 16,
transformers' Adafactor (relative step), 2 steps; 3 phases."""

import os

import torch
from transformers import MT5Config, MT5ForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6902)
if SMALL:
    config = MT5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=2)
    B, L, T = 2, 16, 8
else:
    config = MT5Config(
        vocab_size=250112,
        d_model=512,
        d_kv=64,
        d_ff=1024,
        num_layers=8,
        num_heads=6,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )
    B, L, T = 16, 512, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MT5ForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
optimizer = Adafactor(model.parameters(), scale_parameter=True, relative_step=True, warmup_init=True, lr=None)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(1, config.vocab_size, (B, L), device=device)
    tgt = torch.randint(1, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
