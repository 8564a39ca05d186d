"""HF GPT2LMHeadModel from a GPT2Config (768 wide, 12 layers, 12 heads), fp32, greedy generate()
with use_cache=False (every step runs the whole sequence again) on a batch of 4 prompts of 200
tokens, 48 new tokens (min_new_tokens equal); 1 phase."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2204)
if SMALL:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=4, n_positions=64)
    B, T, NEW = 2, 8, 4
else:
    config = GPT2Config()
    B, T, NEW = 4, 200, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, T), device=device)
with torch.no_grad():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=False,
        pad_token_id=0,
    )
assert out.shape == (B, T + NEW)
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
