"""transformers' continuous batching (`model.generate_batch`, paged attention): a Llama-style decoder from
its config (hidden 1024, 8 layers, 16 heads, 4 KV heads, vocab 32000) in bf16, 12 prompts of 24 to 200 tokens
(integer ids), greedy, 48 new tokens each (eos disabled: `eos_token_id=-1`), with the default continuous
batching config: the paged KV cache is sized from `torch.cuda.mem_get_info` and the allocator's counters
(90% of what is free), the default max batch tokens, CUDA-graph warmup as the defaults choose. Then the
same prompts through plain `generate` (left padding, a dynamic cache) for comparison.

Every request runs to max_new_tokens: no value-dependent sizes. 3 phases."""

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

torch.manual_seed(2431)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
lengths = [24, 40, 56, 72, 88, 104, 120, 136, 152, 168, 184, 200]
prompts = [torch.randint(1, 32000, (n,)).tolist() for n in lengths]
gen = GenerationConfig(max_new_tokens=48, do_sample=False, eos_token_id=-1, pad_token_id=0)
report("setup")

out = model.generate_batch(inputs=prompts, generation_config=gen)
assert len(out) == len(prompts)
del out
report("generate_batch_default_config")

ids = torch.zeros(len(prompts), max(lengths), dtype=torch.long)
mask = torch.zeros_like(ids)
for i, p in enumerate(prompts):
    ids[i, -len(p) :] = torch.tensor(p)
    mask[i, -len(p) :] = 1
with torch.no_grad():
    seq = model.generate(
        input_ids=ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=48, min_new_tokens=48, do_sample=False,
        pad_token_id=0,
    )
del seq
report("plain_generate_left_padded")
