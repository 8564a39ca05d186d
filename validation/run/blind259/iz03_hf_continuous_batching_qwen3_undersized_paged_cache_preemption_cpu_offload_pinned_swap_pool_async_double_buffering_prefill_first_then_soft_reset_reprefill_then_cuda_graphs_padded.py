"""transformers' continuous batching when the paged KV cache is too small for the load: a Qwen3-style decoder
from its config (hidden 1,024, 10 layers, 16 heads, 8 KV heads, head_dim 64, q/k RMSNorm, vocab 40,000, tied
embeddings) in bf16; 12 prompts of 96 to 448 tokens, 96 new tokens each, into a cache of 64 blocks of 32 tokens
(2,048 token slots, less than the 4,032 + 1,152 the requests need together), so the scheduler evicts running
requests. First with a 0.25 GiB pinned CPU swap pool (`cpu_offload_space`: evicted requests' blocks are
copied out through the compute stream and back through a GPU staging tensor), async double buffering
(`use_async_batching=True`: two sets of input/output tensors) and the prefill-first scheduler; then without
the swap pool (soft reset: evicted requests are prefilled again over prompt + generated tokens), FIFO; then a
cache large enough with CUDA graphs on for both paths (padded query/KV sizes).

Greedy, eos disabled, every request runs to max_new_tokens: no value-dependent sizes. 4 phases."""

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
from transformers.generation.configuration_utils import ContinuousBatchingConfig

torch.manual_seed(2593)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3Config(
    vocab_size=40000,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=10,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
model = Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
prompts = [torch.randint(1, 40000, (96 + 32 * i,)).tolist() for i in range(12)]
gen = GenerationConfig(max_new_tokens=96, do_sample=False, eos_token_id=-1, pad_token_id=0)
report("setup")

swap = ContinuousBatchingConfig(
    block_size=32, num_blocks=64, max_batch_tokens=512, use_cuda_graph=False, cpu_offload_space=0.25,
    use_async_batching=True, scheduler_type="prefill_first",
)
out = model.generate_batch(inputs=prompts, generation_config=gen, continuous_batching_config=swap)
assert all(len(o.generated_tokens) == 96 for o in out.values())
del out
report("undersized_cache_cpu_swap_async_prefill_first")

soft = ContinuousBatchingConfig(
    block_size=32, num_blocks=64, max_batch_tokens=512, use_cuda_graph=False, use_async_batching=False
)
out = model.generate_batch(inputs=prompts, generation_config=gen, continuous_batching_config=soft)
assert all(len(o.generated_tokens) == 96 for o in out.values())
del out
report("undersized_cache_soft_reset_fifo")

graphs = ContinuousBatchingConfig(block_size=32, num_blocks=256, max_batch_tokens=512, use_cuda_graph=True)
out = model.generate_batch(inputs=prompts, generation_config=gen, continuous_batching_config=graphs)
assert all(len(o.generated_tokens) == 96 for o in out.values())
del out
report("cuda_graphs_both_paths")
