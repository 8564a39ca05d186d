"""HF `generate()` on a T5ForConditionalGeneration built from a t5-base-sized T5Config (768 wide, 12+12
layers, 32128 vocab), fp16 weights: an encoder pass over batch 8 of 512 tokens, then greedy decoding of
exactly 64 tokens with the encoder-decoder cache; then the same with 3 beams at batch 4."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(902)
if SMALL:
    config = T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=200)
    SRC, NEW = 16, 4
else:
    config = T5Config(d_model=768, d_ff=3072, num_layers=12, num_heads=12, d_kv=64, vocab_size=32128)
    SRC, NEW = 512, 64
config.decoder_start_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
model = T5ForConditionalGeneration(config).to(device=device, dtype=torch.float16 if device == "cuda" else torch.float32).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(2, config.vocab_size, (8, SRC), device=device)
out = model.generate(input_ids=ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, eos_token_id=None)
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
out = model.generate(input_ids=ids[:4], max_new_tokens=NEW, min_new_tokens=NEW, num_beams=3, do_sample=False, eos_token_id=None)
if device == "cuda":
    print(f"beams peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
