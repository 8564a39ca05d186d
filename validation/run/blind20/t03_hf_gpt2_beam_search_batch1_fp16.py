"""HF GPT2LMHeadModel from a GPT2Config (1024 wide, 12 layers, 16 heads, 50,257 vocabulary), fp16
weights, beam search generate() with num_beams=3 at batch 1 from a 600-token prompt, 150 new tokens
(min_new_tokens equal, no_repeat_ngram_size=3), then num_beams=5 from a 200-token prompt; 2 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2003)
if SMALL:
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=4, n_positions=256)
    RUNS = ((3, 16, 4), (5, 8, 3))
else:
    config = GPT2Config(vocab_size=50257, n_embd=1024, n_layer=12, n_head=16, n_positions=1024)
    RUNS = ((3, 600, 150), (5, 200, 150))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for beams, prompt, new in RUNS:
    ids = torch.randint(0, config.vocab_size, (1, prompt), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            num_beams=beams,
            no_repeat_ngram_size=3,
            do_sample=False,
            pad_token_id=0,
        )
    assert out.shape == (1, prompt + new)
    del out
    if device == "cuda":
        print(
            f"beams{beams} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
