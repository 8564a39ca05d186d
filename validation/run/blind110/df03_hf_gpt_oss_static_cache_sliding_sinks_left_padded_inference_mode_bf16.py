"""Serving HF GPT-OSS built from a config (attention sinks, alternating sliding-window 256 and full
layers, 16 experts with top-4 routing; 6 layers of 1024 wide, 16 heads with 4 KV heads, a 64,000
vocabulary) in bf16 under inference_mode with cache_implementation="static" (full layers sized to
the prompt plus the new tokens, sliding layers to their window): greedy decoding of 64 tokens for
a left-padded batch of 4 prompts (up to 1,800 tokens), then for one 3,000-token prompt with a
static cache made by hand (StaticCache(config, max_cache_len)) and passed in; 3 phases."""

import os

import torch
from transformers import GptOssConfig, GptOssForCausalLM, StaticCache

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11003)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 64000
cfg = GptOssConfig(
    vocab_size=V,
    hidden_size=64 if SMALL else 1024,
    intermediate_size=64 if SMALL else 1024,
    head_dim=16 if SMALL else 64,
    num_hidden_layers=2 if SMALL else 6,
    num_attention_heads=4 if SMALL else 16,
    num_key_value_heads=2 if SMALL else 4,
    num_local_experts=4 if SMALL else 16,
    num_experts_per_tok=2 if SMALL else 4,
    sliding_window=8 if SMALL else 256,
    max_position_embeddings=131072,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
model = GptOssForCausalLM(cfg).to(device, torch.bfloat16).eval()
LENS = [30, 17, 9, 24] if SMALL else [1800, 1210, 333, 960]
N = 5 if SMALL else 64
width = max(LENS)
ids = torch.zeros(len(LENS), width, dtype=torch.long)
mask = torch.zeros(len(LENS), width, dtype=torch.long)
for i, n in enumerate(LENS):
    ids[i, width - n :] = torch.randint(3, V, (n,))
    mask[i, width - n :] = 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        cache_implementation="static",
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"batch {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del out
L = 40 if SMALL else 3000
with torch.inference_mode():
    cache = StaticCache(config=model.config, max_cache_len=L + N)
    prompt = torch.randint(3, V, (1, L), device=device)
    out = model.generate(
        prompt,
        past_key_values=cache,
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"long {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
