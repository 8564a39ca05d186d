"""Long generation with the KV cache offloaded to the host, as transformers offers it for small
GPUs: an HF LlamaForCausalLM from config (2048 wide, 8 layers, 16 heads with 8 KV heads) in bf16,
generate(cache_implementation="offloaded") for a batch of 4 prompts of 2048 tokens and 256 new
tokens, greedy, min_new_tokens = max_new_tokens (each layer's cache moved to the host after use and
prefetched on a side stream); sdpa attention; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3504)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, P, N = 2, 12, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, P, N = 4, 2048, 256
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
model.generation_config.pad_token_id = 0
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(1, config.vocab_size, (B, P), device=device)
for run in range(2):
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        cache_implementation="offloaded" if device == "cuda" else None,
    )
    del out
    if device == "cuda":
        print(
            f"generate {run} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
