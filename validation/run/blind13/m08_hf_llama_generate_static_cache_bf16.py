"""HF LlamaForCausalLM from a LlamaConfig (1024 wide, 8 layers, 16 heads, 4 key-value heads), bf16 weights,
greedy generate() of 256 new tokens after a 512-token prompt at batch 4 with cache_implementation="static"
(compilation disabled), then a second generation with the default dynamic cache; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1308)
if SMALL:
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    BATCH, PROMPT, NEW = 2, 8, 4
else:
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
    BATCH, PROMPT, NEW = 4, 512, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (BATCH, PROMPT), device=device)
mask = torch.ones_like(ids)
for cache in ("static", "dynamic"):
    kw = {"cache_implementation": "static", "disable_compile": True} if cache == "static" else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW,
                             do_sample=False, pad_token_id=0, **kw)
    assert out.shape == (BATCH, PROMPT + NEW)
    del out
    if device == "cuda":
        print(f"{cache} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
