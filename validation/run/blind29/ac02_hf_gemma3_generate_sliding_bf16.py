"""HF Gemma3ForCausalLM from a small Gemma3TextConfig (640 wide, 12 layers, 4 heads with 1 KV head of
256, a 512-token sliding window on five of every six layers, 32k vocabulary), bf16, greedy generate of
exactly 256 new tokens after 1024-token prompts at batch 4, then batch 8 (the cache of the sliding
layers stops growing); 3 phases."""

import os

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2902)
if SMALL:
    config = Gemma3TextConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
    )
    SIZES, S, NEW = (2, 3), 16, 6
else:
    config = Gemma3TextConfig(
        vocab_size=32000,
        hidden_size=640,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=512,
        max_position_embeddings=8192,
    )
    SIZES, S, NEW = (4, 8), 1024, 256
config.eos_token_id, config.bos_token_id, config.pad_token_id = 1, 2, 0
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Gemma3ForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b in SIZES:
    ids = torch.randint(3, config.vocab_size, (b, S), device=device)
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
