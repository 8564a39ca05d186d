"""HF LlamaForCausalLM from a LlamaConfig (512 wide, 4 layers, 8 heads, 4 key-value heads, 8,000
vocabulary), bf16 weights, greedy generate() with cache_implementation="static" (transformers
compiles the decoding forward with mode="reduce-overhead") at batch 2, prompt 128 and 40 new tokens
(min_new_tokens equal), then again at batch 2, prompt 64 and 24 new tokens; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3109)
config = LlamaConfig(
    vocab_size=300 if SMALL else 8000,
    hidden_size=48 if SMALL else 512,
    intermediate_size=64 if SMALL else 1408,
    num_hidden_layers=1 if SMALL else 4,
    num_attention_heads=4 if SMALL else 8,
    num_key_value_heads=2 if SMALL else 4,
    max_position_embeddings=256 if SMALL else 1024,
)
RUNS = ((2, 16, 4), (2, 8, 3)) if SMALL else ((2, 128, 40), (2, 64, 24))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for batch, prompt, new in RUNS:
    ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            cache_implementation="static",
            pad_token_id=0,
        )
    assert out.shape == (batch, prompt + new)
    del out
    if device == "cuda":
        print(f"p{prompt} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
