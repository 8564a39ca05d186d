"""`generate` with a static KV cache as transformers serves it by default: with `cache_implementation="static"`
on a CUDA model, generate compiles the decoding step itself (`_valid_auto_compile_criteria`: a compileable
cache), with the default `CompileConfig` (mode "reduce-overhead": Inductor's code run under CUDA graph trees,
whose private pool keeps the graphs' memory), while the prefill runs eagerly. A Qwen2-style decoder from its
config (hidden 896, 8 layers, 14 heads, 2 KV heads, q/k/v biases, vocab 32,000, tied embeddings) in bf16, a
batch of 8 prompts of 160 tokens, 48 new tokens, greedy. Then a second batch of new prompts of the same shape
(the same compiled step, the graphs replayed, the model's static cache reset and reused); then a
`GenerationConfig` carrying `compile_config=CompileConfig(fullgraph=True, dynamic=False, mode="default")`
(another compiled call: Inductor's code without CUDA graphs) with top-k sampling.

min_new_tokens = max_new_tokens (eos masked): no value-dependent sizes. 4 phases."""

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
from transformers.generation.configuration_utils import CompileConfig

torch.manual_seed(2595)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2Config(
    vocab_size=32000,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=8,
    num_attention_heads=14,
    num_key_value_heads=2,
    tie_word_embeddings=True,
    max_position_embeddings=2048,
)
model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
report("setup")

ids = torch.randint(1, 32000, (8, 160), device="cuda")
with torch.no_grad():
    seq = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, min_new_tokens=48, do_sample=False,
        cache_implementation="static",
    )
assert seq.shape == (8, 208)
del seq
report("static_cache_auto_compile_reduce_overhead")

ids = torch.randint(1, 32000, (8, 160), device="cuda")
with torch.no_grad():
    seq = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, min_new_tokens=48, do_sample=False,
        cache_implementation="static",
    )
del seq
report("second_batch_same_shapes_graphs_replayed")

gen = GenerationConfig(
    max_new_tokens=48, min_new_tokens=48, do_sample=True, top_k=40, temperature=0.9, cache_implementation="static",
    compile_config=CompileConfig(fullgraph=True, dynamic=False, mode="default"), pad_token_id=0,
)
with torch.no_grad():
    seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
del seq
report("compile_config_fullgraph_default_mode_sampling")
