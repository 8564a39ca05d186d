"""HF GPT2LMHeadModel from a GPT2Config (1024 wide, 16 layers, 16 heads) in fp16, a hand-written
greedy decode loop over model(..., past_key_values=cache, use_cache=True) with a DynamicCache: a
512-token prefill at batch 8, then 64 steps of one token each; 2 phases."""

import os

import torch
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2405)
if SMALL:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=4, n_positions=64)
    B, T, NEW = 2, 8, 4
else:
    config = GPT2Config(n_embd=1024, n_layer=16, n_head=16)
    B, T, NEW = 8, 512, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, T), device=device)
cache = DynamicCache(config=config)
with torch.no_grad():
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    tokens = [token]
    for _ in range(NEW - 1):
        out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
result = torch.cat(tokens, dim=1)
assert result.shape == (B, NEW)
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
