"""Greedy generation that keeps every step's scores: an HF Qwen3ForCausalLM from config (1024 wide,
12 layers, 16 heads with 8 KV heads, a 151k vocabulary) in bf16, return_dict_in_generate with
output_scores and output_logits, batch 8 of 256-token prompts, exactly 64 new tokens; 2 phases."""

import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4201)
if SMALL:
    config = Qwen3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    B, S, N = 2, 16, 4
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
    )
    B, S, N = 8, 256, 64
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, S), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    max_new_tokens=N,
    min_new_tokens=N,
    do_sample=False,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
    pad_token_id=0,
)
if device == "cuda":
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
    print(f"generate {tuple(out.sequences.shape)} {len(out.scores)} peak {peak} reserved {reserved}")
