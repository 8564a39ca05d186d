"""HF CohereForCausalLM (parallel attention and MLP, LayerNorm without bias, logit scale, tied
embeddings) from a small CohereConfig (1024 wide, 8 layers, 16 heads with 4 KV heads, 64k vocabulary),
bf16, greedy generate of exactly 128 new tokens with the dynamic cache after 512-token prompts at
batch 4, then batch 8; 3 phases."""

import os

import torch
from transformers import CohereConfig, CohereForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2706)
if SMALL:
    config = CohereConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    SIZES, S, NEW = (2, 3), 16, 4
else:
    config = CohereConfig(
        vocab_size=64000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        eos_token_id=2,
    )
    SIZES, S, NEW = (4, 8), 512, 128
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = CohereForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b in SIZES:
    ids = torch.randint(10, config.vocab_size, (b, S), device=device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
    del ids, out
    if device == "cuda":
        print(f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
