"""HF LlamaForCausalLM from a LlamaConfig (1536 wide, 8 layers, 24 heads, 8 key-value heads, 32,000
vocabulary), bf16 weights, greedy generate() with cache_implementation="static" at batch 1, prompt 700
and 200 new tokens (min_new_tokens equal), then batch 3 with prompt 300 and 100 new tokens; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2001)
if SMALL:
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    RUNS = ((1, 16, 4), (3, 8, 3))
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=24,
        num_key_value_heads=8,
        max_position_embeddings=4096,
    )
    RUNS = ((1, 700, 200), (3, 300, 100))
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
        print(f"b{batch} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
