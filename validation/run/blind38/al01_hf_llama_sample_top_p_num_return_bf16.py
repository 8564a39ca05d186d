"""Sampling generation as chat demos run it: an HF LlamaForCausalLM from config (2048 wide, 16
layers, 16 heads with 8 KV heads) in bf16, do_sample with temperature 0.8, top-k 50 and top-p 0.9,
two sequences returned per prompt, batch 4 of 512-token prompts, exactly 128 new tokens; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3801)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S, N = 2, 16, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, S, N = 4, 512, 128
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, S), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    do_sample=True,
    temperature=0.8,
    top_k=50,
    top_p=0.9,
    num_return_sequences=2,
    max_new_tokens=N,
    min_new_tokens=N,
    pad_token_id=0,
)
if device == "cuda":
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
    print(f"generate {tuple(out.shape)} peak {peak} reserved {reserved}")
