"""mem_get_info probe of blind243/ij02 (the continuous-batching manager sizes its cache from it): the
script's steps, printing the device's used memory at each phase and before the manager is made."""


import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
from transformers.generation.configuration_utils import ContinuousBatchingConfig

torch.manual_seed(2432)


def report(tag):
    free, total = torch.cuda.mem_get_info()
    print(f"{tag}: mem_get_info free {free} total {total} used {total - free}")
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2Config(
    vocab_size=50000,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=12,
    num_attention_heads=14,
    num_key_value_heads=2,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)
model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
prompts = [torch.randint(1, 50000, (32 + 16 * i,)).tolist() for i in range(16)]
gen = GenerationConfig(max_new_tokens=32, do_sample=False, eos_token_id=-1, pad_token_id=0)
report("setup")

cb = ContinuousBatchingConfig(block_size=64, num_blocks=512, max_batch_tokens=1024, use_cuda_graph=False)
out = model.generate_batch(inputs=prompts, generation_config=gen, continuous_batching_config=cb)
assert len(out) == len(prompts)
del out
report("generate_batch_explicit_config")

free, total = torch.cuda.mem_get_info()
print(f"before manager: used {total - free} reserved {torch.cuda.memory_reserved()}")
manager = model.init_continuous_batching(
    generation_config=gen,
    continuous_batching_config=ContinuousBatchingConfig(max_memory_percent=0.25, use_cuda_graph=False),
)
manager.start()
print("cache blocks", manager.batch_processor.cache.num_blocks if getattr(manager, "batch_processor", None) else None)
ids = [manager.add_request(input_ids=p, max_new_tokens=32) for p in prompts[:6]]
got = 0
while got < len(ids):
    r = manager.get_result(timeout=30)
    if r is not None and r.is_finished():
        got += 1
manager.stop(block=True)
del manager
report("manager_add_request_get_result")
