"""A Ministral decoder from MinistralConfig (2,048 wide, 12 layers, 16 heads with 8 KV heads of 128,
SwiGLU of 6,144, vocabulary 32,768, bf16) whose layers alternate three sliding-window layers (512
positions) with one full-attention layer, served with generate under inference_mode: a left-padded
batch of 8 prompts (600 to 1,024 tokens, an attention mask) to 64 new tokens greedily with
cache_implementation="static" run eagerly (disable_compile=True; a StaticCache whose sliding layers
hold 512 positions), then the same batch with cache_implementation="offloaded_static" (the
full-attention layers' cache kept on the host and prefetched layer by layer), then 4 prompts of 2,048
tokens sampled (top-k 50, temperature 0.8) to 48 new tokens with cache_implementation="offloaded" (an
offloaded DynamicCache); 4 phases."""

import os

import torch
from transformers import MinistralConfig, MinistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12901)
PATTERN = ["sliding_attention"] * 3 + ["full_attention"]
if SMALL:
    cfg = MinistralConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=16,
        layer_types=PATTERN,
        max_position_embeddings=512,
    )
    B, LO, HI, NEW, B2, L2, NEW2 = 2, 20, 32, 8, 2, 48, 6
else:
    cfg = MinistralConfig(
        vocab_size=32768,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        sliding_window=512,
        layer_types=PATTERN * 3,
        max_position_embeddings=8192,
    )
    B, LO, HI, NEW, B2, L2, NEW2 = 8, 600, 1024, 64, 4, 2048, 48
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = MinistralForCausalLM(cfg).to(device=device, dtype=dtype).eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = 0


def left_padded(batch, lo, hi):
    lengths = torch.randint(lo, hi + 1, (batch,))
    lengths[0] = hi
    ids = torch.randint(1, cfg.vocab_size, (batch, hi))
    mask = (torch.arange(hi)[None] >= (hi - lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, 0).to(device), mask.to(device)


def report(name, out):
    if device == "cuda":
        print(
            f"{name} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name} {tuple(out.shape)}")


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
ids, mask = left_padded(B, LO, HI)
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,
    )
    report("static", out)
    del out
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=False,
        cache_implementation="offloaded_static",
        disable_compile=True,
    )
    report("offloaded_static", out)
    del out, ids, mask
    ids = torch.randint(1, cfg.vocab_size, (B2, L2), device=device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW2,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        cache_implementation="offloaded",
    )
    report("offloaded sampled", out)
