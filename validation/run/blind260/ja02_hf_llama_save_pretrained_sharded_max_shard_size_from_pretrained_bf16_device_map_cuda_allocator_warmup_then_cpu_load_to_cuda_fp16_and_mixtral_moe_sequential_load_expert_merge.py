"""Hugging Face checkpoints written and read: a Llama-style model from a config (hidden 1024, 12 layers, GQA
16/4 heads, SwiGLU 2816, vocab 32000, untied head) made on the GPU in bf16 and written by `save_pretrained`
in shards of at most 100 MB (safetensors, copied to the host shard by shard), then read back by
`from_pretrained(dir, dtype=torch.bfloat16, device_map="cuda")` (transformers 5: the caching-allocator
warm-up of the model's bytes, the weights materialised on the GPU by the loader's thread pool), a bf16
forward under no_grad at 4 x 1024; then the usual two-step load: `from_pretrained(dir,
dtype=torch.float16)` on the host and `model.to("cuda")`, the same forward; last a Mixtral-style MoE (8
experts of 1408, top-2, 4 layers of 1024) written by `save_pretrained` (per-expert tensors, the original
format) and read with the loader made sequential (`HF_DEACTIVATE_ASYNC_LOAD=1`): each layer's experts
materialised on the GPU, then stacked and concatenated into the fused expert tensors (transformers'
`MergeModulelist` and `Concatenate` conversions), and a forward.

A phase that ends a model releases it and empties the cache before it reports. No value-dependent sizes. 5
phases."""

import gc
import os
import tempfile

import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
)

torch.manual_seed(2602)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def forward(model, batch, seq, vocab):
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    with torch.no_grad():
        out = model(input_ids=ids)
    del out, ids


tmp = tempfile.TemporaryDirectory()
dense_dir = os.path.join(tmp.name, "llama")
moe_dir = os.path.join(tmp.name, "mixtral")

cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(dense_dir, max_shard_size="100MB")
del model
gc.collect()
torch.cuda.empty_cache()
report("build_bf16_on_gpu_save_pretrained_sharded_release")

model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.bfloat16, device_map="cuda")
report("from_pretrained_bf16_device_map_cuda")

model.eval()
forward(model, 4, 1024, cfg.vocab_size)
report("forward_bf16_no_grad")

del model
gc.collect()
torch.cuda.empty_cache()
model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float16)
model.to("cuda")
model.eval()
forward(model, 4, 1024, cfg.vocab_size)
del model
gc.collect()
torch.cuda.empty_cache()
report("cpu_from_pretrained_fp16_then_to_cuda_forward_release")

moe_cfg = MixtralConfig(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=1408,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    num_local_experts=8,
    num_experts_per_tok=2,
    max_position_embeddings=2048,
)
MixtralForCausalLM(moe_cfg).to(torch.bfloat16).save_pretrained(moe_dir, max_shard_size="200MB")
os.environ["HF_DEACTIVATE_ASYNC_LOAD"] = "1"
moe = AutoModelForCausalLM.from_pretrained(moe_dir, dtype=torch.bfloat16, device_map="cuda")
moe.eval()
forward(moe, 2, 512, moe_cfg.vocab_size)
report("mixtral_sequential_load_expert_merge_forward")
tmp.cleanup()
