"""transformers' continuous batching as a chat server uses it: every request starts with the same 640-token
system prompt. A Llama-style decoder from its config (hidden 1,024, 12 layers, 16 heads, 8 KV heads, vocab
32,000) in bf16. `generate_batch` over 16 requests (system prompt + a user turn of 24 to 144 tokens) with
block_size 64, 512 blocks, 1,024 batch tokens and prefix caching (`allow_block_sharing`, the default: complete
blocks are hashed and later requests reference the system prompt's blocks), keeping the manager and its
paged cache alive (`persistent_manager=True`); a second batch of 12 new user turns through the same cached
manager; `destroy_cached_continuous_batching_manager`; the first batch again with block sharing off; then the
manager API with per-request processors: 8 requests queued before `start()`, streaming, each with its own
temperature, read back through `request_id_iter`.

Greedy except the last phase's sampling; eos disabled, every request runs to its max_new_tokens: no
value-dependent sizes. 5 phases."""

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.configuration_utils import ContinuousBatchingConfig

torch.manual_seed(2592)


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
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=8,
    max_position_embeddings=4096,
)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
system = torch.randint(1, 32000, (640,)).tolist()
first = [system + torch.randint(1, 32000, (24 + 8 * i,)).tolist() for i in range(16)]
second = [system + torch.randint(1, 32000, (40 + 12 * i,)).tolist() for i in range(12)]
greedy = GenerationConfig(max_new_tokens=48, do_sample=False, eos_token_id=-1, pad_token_id=0)
report("setup")

shared = ContinuousBatchingConfig(block_size=64, num_blocks=512, max_batch_tokens=1024, use_cuda_graph=False)
out = model.generate_batch(
    inputs=first, generation_config=greedy, continuous_batching_config=shared, persistent_manager=True
)
assert len(out) == len(first)
del out
report("generate_batch_prefix_sharing_persistent_manager")

out = model.generate_batch(
    inputs=second, generation_config=greedy, continuous_batching_config=shared, persistent_manager=True
)
assert len(out) == len(second)
del out
model.destroy_cached_continuous_batching_manager()
report("second_batch_same_manager_then_destroy")

unshared = ContinuousBatchingConfig(
    block_size=64, num_blocks=512, max_batch_tokens=1024, use_cuda_graph=False, allow_block_sharing=False
)
out = model.generate_batch(inputs=first, generation_config=greedy, continuous_batching_config=unshared)
assert len(out) == len(first)
del out
report("generate_batch_block_sharing_off")

sample = GenerationConfig(max_new_tokens=40, do_sample=True, temperature=0.7, top_k=40, eos_token_id=-1, pad_token_id=0)
manager = model.init_continuous_batching(
    generation_config=sample,
    continuous_batching_config=ContinuousBatchingConfig(
        block_size=64, num_blocks=256, max_batch_tokens=512, use_cuda_graph=False, per_request_processors=True
    ),
)
ids = [
    manager.add_request(input_ids=first[i], max_new_tokens=40, streaming=True, temperature=0.3 + 0.1 * i)
    for i in range(8)
]
manager.start()
streamed = 0
for rid in ids:
    for chunk in manager.request_id_iter(rid):
        streamed += 1
manager.stop(block=True)
del manager
report("manager_streaming_per_request_temperature")
