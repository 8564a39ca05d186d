"""HF GPTJForCausalLM (parallel attention + MLP block, partial interleaved rotary) from a small
GPTJConfig (1024 wide, 8 layers, 16 heads, rotary_dim 32) in fp16, eager attention as GPT-J
has no sdpa path, greedy generate() of 64 new tokens from a 256-token prompt at batch 4; 2 phases
(load, generate)."""

import os

import torch
from transformers import GPTJConfig, GPTJForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3004)
if SMALL:
    config = GPTJConfig(vocab_size=128, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64)
    B, S, N = 2, 8, 4
else:
    config = GPTJConfig(vocab_size=50400, n_embd=1024, n_layer=8, n_head=16, rotary_dim=32, n_positions=2048)
    B, S, N = 4, 256, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTJForCausalLM(config).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, S), device=device)
with torch.no_grad():
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
print(tuple(out.shape))
del out
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
