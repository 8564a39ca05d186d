"""A hand-written sampling loop over HF GPT2LMHeadModel (gpt2-medium-sized, fp16) with its
DynamicCache: a 512-token prompt at batch 16, then 128 tokens each drawn by hand-written nucleus
sampling (temperature, sort, cumsum, scatter of the removed mask, multinomial); 2 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7906)
if SMALL:
    config = GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    B, P, NEW = 2, 8, 4
else:
    config = GPT2Config(vocab_size=50257, n_embd=1024, n_layer=24, n_head=16, n_positions=1024)
    B, P, NEW = 16, 512, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, P), device=device)
with torch.inference_mode():
    out = model(input_ids=ids, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1]
    tokens = [ids]
    for _ in range(NEW):
        probs = torch.softmax(logits.float() / 0.8, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cum = sorted_probs.cumsum(dim=-1)
        drop = cum - sorted_probs > 0.9
        probs = probs.masked_fill(drop.scatter(1, order, drop), 0.0)
        nxt = torch.multinomial(probs, 1)
        tokens.append(nxt)
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
    text = torch.cat(tokens, dim=1)
if device == "cuda":
    print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
