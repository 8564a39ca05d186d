"""HF SmolLM3ForCausalLM (GQA, every fourth layer without RoPE) built from its config, 16 layers,
2,048 wide, 4 KV heads, a 49,152 vocabulary, bf16 weights, greedy generation of 96 new tokens for
4 left-padded prompts of up to 1,024 tokens with the dynamic cache, then a second batch of 2
prompts; 3 phases."""

import os

import torch
from transformers import SmolLM3Config, SmolLM3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8502)
if SMALL:
    config = SmolLM3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    L, NEW = 16, 4
else:
    config = SmolLM3Config(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    L, NEW = 1024, 96
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = SmolLM3ForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b):
    lengths = torch.randint(L // 2, L + 1, (b,), device=device)
    lengths[0] = L
    ids = torch.randint(1, config.vocab_size, (b, L), device=device)
    mask = torch.arange(L, device=device)[None, :] >= (L - lengths)[:, None]
    return ids.masked_fill(~mask, 0), mask.long()


for b in (4, 2):
    ids, mask = batch(b)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"batch {b} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, out
