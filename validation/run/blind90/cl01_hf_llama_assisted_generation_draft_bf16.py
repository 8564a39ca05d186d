"""Assisted (speculative) generation with HF transformers: a Llama target (16 layers, 2,048 wide,
GQA with 8 KV heads, a 32,000 vocabulary) and a 2-layer, 512-wide Llama draft model sharing its
vocabulary, both built from configs in bf16; greedy `generate(assistant_model=draft)` of 64 new
tokens for a 768-token prompt, then a 1,536-token prompt, batch 1, dynamic caches; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9001)
common = dict(vocab_size=128 if SMALL else 32000, max_position_embeddings=4096)
if SMALL:
    target_cfg = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, **common
    )
    draft_cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, **common
    )
    PROMPTS, NEW = (12, 20), 6
else:
    target_cfg = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        **common,
    )
    draft_cfg = LlamaConfig(
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        **common,
    )
    PROMPTS, NEW = (768, 1536), 64
for cfg in (target_cfg, draft_cfg):
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = 0, 1, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
target = LlamaForCausalLM(target_cfg).to(device=device, dtype=dtype).eval()
draft = LlamaForCausalLM(draft_cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for L in PROMPTS:
    ids = torch.randint(3, common["vocab_size"], (1, L), device=device)
    with torch.no_grad():
        out = target.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=draft,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"prompt {L} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
