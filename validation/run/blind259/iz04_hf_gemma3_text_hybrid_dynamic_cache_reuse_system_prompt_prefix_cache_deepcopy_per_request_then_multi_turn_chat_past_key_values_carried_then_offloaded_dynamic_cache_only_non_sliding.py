"""Reusing a DynamicCache across `generate` calls, as transformers' docs show for serving ("re-use the cache to
continue generation"), on a Gemma3-style text decoder from its config (hidden 1,024, 12 layers, 5 sliding-window
layers of 256 per full-attention layer, 8 heads, 4 KV heads, head_dim 128, vocab 40,000) in bf16: a 1,024-token
system prompt is prefilled once into `DynamicCache(config=model.config)` (sliding layers keep only their window)
and each of 4 requests generates from a `copy.deepcopy` of it (64 new tokens); then a multi-turn chat (batch 1,
5 turns of 96 user tokens, 48 new tokens each) that carries `past_key_values` from each turn's
`return_dict_in_generate` output into the next (with an all-ones attention mask, as a tokenizer gives); then
a batch of 8 x 1,024-token prompts with
`DynamicCache(config, offloading=True, offload_only_non_sliding=True)` (the full-attention layers' KV live on
the host between their uses and are prefetched one layer ahead on a side stream) against the same batch with a
plain dynamic cache.

Greedy with min_new_tokens = max_new_tokens (eos masked): no value-dependent sizes. 5 phases."""

import copy

import torch
from transformers import DynamicCache, Gemma3ForCausalLM, Gemma3TextConfig

torch.manual_seed(2594)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Gemma3TextConfig(
    vocab_size=40000,
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=12,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=128,
    sliding_window=256,
    max_position_embeddings=8192,
)
model = Gemma3ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
report("setup")

system = torch.randint(1, 40000, (1, 1024), device="cuda")
with torch.no_grad():
    prompt_cache = model(input_ids=system, past_key_values=DynamicCache(config=model.config)).past_key_values
for i in range(4):
    question = torch.randint(1, 40000, (1, 32 + 16 * i), device="cuda")
    ids = torch.cat([system, question], dim=1)
    cache = copy.deepcopy(prompt_cache)
    with torch.no_grad():
        seq = model.generate(
            input_ids=ids, past_key_values=cache, max_new_tokens=64, min_new_tokens=64, do_sample=False
        )
    assert seq.shape[1] == ids.shape[1] + 64
    del cache, seq
del prompt_cache
report("system_prompt_cache_deepcopy_per_request")

history = torch.randint(1, 40000, (1, 96), device="cuda")
past = None
for turn in range(5):
    with torch.no_grad():
        out = model.generate(
            input_ids=history, attention_mask=torch.ones_like(history), past_key_values=past, max_new_tokens=48, min_new_tokens=48, do_sample=False,
            return_dict_in_generate=True,
        )
    past = out.past_key_values
    history = torch.cat([out.sequences, torch.randint(1, 40000, (1, 96), device="cuda")], dim=1)
    del out
assert history.shape[1] == 96 + 5 * (48 + 96)
del past, history
report("multi_turn_chat_carried_past_key_values")

batch = torch.randint(1, 40000, (8, 1024), device="cuda")
with torch.no_grad():
    seq = model.generate(
        input_ids=batch, past_key_values=DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=True),
        max_new_tokens=64, min_new_tokens=64, do_sample=False,
    )
del seq
report("offloaded_dynamic_cache_only_non_sliding")

with torch.no_grad():
    seq = model.generate(input_ids=batch, max_new_tokens=64, min_new_tokens=64, do_sample=False)
del seq
report("plain_dynamic_cache_same_batch")
