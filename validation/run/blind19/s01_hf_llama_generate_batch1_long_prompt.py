"""HF LlamaForCausalLM from a LlamaConfig (2048 wide, 8 layers, 32 heads, 8 key-value heads, 32,000
vocabulary), bf16 weights, greedy generate() at batch 1 with a 1,000-token prompt and 256 new tokens
(min_new_tokens equal), then batch 2 with a 3,000-token prompt and 64 new tokens; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1901)
if SMALL:
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    RUNS = ((1, 16, 4), (2, 24, 3))
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=8192,
    )
    RUNS = ((1, 1000, 256), (2, 3000, 64))
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
            pad_token_id=0,
        )
    assert out.shape == (batch, prompt + new)
    del out
    if device == "cuda":
        print(f"b{batch} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
