"""HF transformers Arcee (Llama layout with a ReLU-squared non-gated MLP) built from a config at
12 layers, 2,048 wide, 16 heads with 4 KV heads, a 32,000 vocabulary, in bf16; sampled generation
with cache_implementation="static" run eagerly (disable_compile=True; top-k 50, temperature 0.8,
multinomial draws on the GPU) of 96 new tokens for a batch of 4 left-padded prompts up to 512
tokens, then a batch of 8 up to 1,024 tokens; 3 phases."""

import os

import torch
from transformers import ArceeConfig, ArceeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9108)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
if SMALL:
    cfg = ArceeConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **TOKENS,
    )
    RUNS, NEW = ((2, 12), (3, 20)), 6
else:
    cfg = ArceeConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        **TOKENS,
    )
    RUNS, NEW = ((4, 512), (8, 1024)), 96
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = ArceeForCausalLM(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for B, L in RUNS:
    ids = torch.randint(3, cfg.vocab_size, (B, L), device=device)
    attn = torch.ones_like(ids)
    for i in range(B):
        pad = (i * L) // (2 * B)
        ids[i, :pad] = 0
        attn[i, :pad] = 0
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=True,
            top_k=50,
            temperature=0.8,
            cache_implementation="static",
            disable_compile=True,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"batch {B} prompt {L} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, out
