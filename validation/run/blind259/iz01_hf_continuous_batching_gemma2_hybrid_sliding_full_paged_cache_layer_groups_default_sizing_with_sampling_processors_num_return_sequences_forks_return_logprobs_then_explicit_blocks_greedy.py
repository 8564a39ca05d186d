"""transformers' continuous batching on a hybrid-attention decoder: a Gemma2-style model from its config (hidden
1,024, 8 layers alternating sliding-window 128 and full attention, 8 heads, 4 KV heads, head_dim 128, vocab
32,000) in bf16. The paged cache splits the layers into one sliding and one full-attention group
(`group_layers_by_attn_type`). First `generate_batch` with the default sizing (num_blocks and max_batch_tokens
solved from `torch.cuda.mem_get_info`; with logit processors the cache takes 80% of what is free, not 90%),
sampling (temperature 0.8, top-k 50, top-p 0.9), 3 return sequences per prompt (children forked from the
parent's prefill, `fork_request` + `copy_cache`) and `return_logprobs`, CUDA graphs off; then an explicit
layout (block_size 32, 320 blocks, 512 batch tokens), greedy; then plain `generate` of the same prompts
(left padded, the hybrid DynamicCache) with sampling and 2 return sequences.

Every request runs to max_new_tokens (eos disabled in the CB config, min_new_tokens in plain generate): no
value-dependent sizes. 4 phases."""

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

torch.manual_seed(2591)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Gemma2Config(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=128,
    sliding_window=128,
    max_position_embeddings=4096,
)
model = Gemma2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
lengths = [40, 64, 88, 112, 136, 160, 184, 208, 232, 256]
prompts = [torch.randint(1, 32000, (n,)).tolist() for n in lengths]
report("setup")

sample = GenerationConfig(
    max_new_tokens=64, do_sample=True, temperature=0.8, top_k=50, top_p=0.9, num_return_sequences=3,
    eos_token_id=-1, pad_token_id=0,
)
out = model.generate_batch(
    inputs=prompts, generation_config=sample,
    continuous_batching_config=ContinuousBatchingConfig(use_cuda_graph=False, return_logprobs=True, seed=11),
)
assert len(out) >= len(prompts)
del out
report("generate_batch_default_sizing_sampling_forks_logprobs")

greedy = GenerationConfig(max_new_tokens=64, do_sample=False, eos_token_id=-1, pad_token_id=0)
cb = ContinuousBatchingConfig(block_size=32, num_blocks=320, max_batch_tokens=512, use_cuda_graph=False)
out = model.generate_batch(inputs=prompts, generation_config=greedy, continuous_batching_config=cb)
assert len(out) == len(prompts)
del out
report("generate_batch_explicit_blocks_greedy")

ids = torch.zeros(len(prompts), max(lengths), dtype=torch.long)
mask = torch.zeros_like(ids)
for i, p in enumerate(prompts):
    ids[i, -len(p) :] = torch.tensor(p)
    mask[i, -len(p) :] = 1
with torch.no_grad():
    seq = model.generate(
        input_ids=ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=64, min_new_tokens=64, do_sample=True,
        temperature=0.8, top_k=50, num_return_sequences=2, pad_token_id=0,
    )
assert seq.shape == (2 * len(prompts), max(lengths) + 64)
del seq
report("plain_generate_hybrid_dynamic_cache_sampling")
