"""HF DeepSeek-V3.2 (DeepseekV32ForCausalLM from a config, random weights, bf16, sdpa): multi-head
latent attention (q LoRA 512, kv LoRA 256, 16 heads of 64 + 32 rope dims, values 64) with DeepSeek
Sparse Attention: a lightning indexer per layer (8 heads of 64, under no_grad) scores every key for
every query in fp32, keeps the top 512 and turns them into a dense boolean mask handed to SDPA
(transformers' eager/sdpa path). MoE after one dense layer: 32 routed experts (top 4 out of 2 of 4
groups, sigmoid router with a correction bias) plus one shared expert; 6 layers of 1024, vocabulary
32,000.
Phase 1: pure bf16 weights, HF non-reentrant gradient checkpointing, AdamW (foreach), batch 2 x 2048
(the top-512 selection masks 3/4 of the late keys), 3 steps. Phase 2: eval under no_grad at 1 x 4096.
Phase 3: greedy generate() of 32 tokens from 2 prompts of 1536 tokens with the dynamic cache (the
indexer keys cached beside the expanded keys/values). Phase 4: the same with
cache_implementation="static" (StaticIndexedLayer buffers of the full length), with
disable_compile=True (no automatic torch.compile of the decoding step). 4 phases after the
model's."""

import torch
from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

torch.manual_seed(26203)
V = 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = DeepseekV32Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=16,
    n_shared_experts=1,
    n_routed_experts=32,
    n_group=4,
    topk_group=2,
    num_experts_per_tok=4,
    routed_scaling_factor=2.5,
    first_k_dense_replace=1,
    kv_lora_rank=256,
    q_lora_rank=512,
    qk_rope_head_dim=32,
    qk_nope_head_dim=64,
    v_head_dim=64,
    head_dim=32,
    index_topk=512,
    index_head_dim=64,
    index_n_heads=8,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "sdpa"
model = DeepseekV32ForCausalLM(cfg).to("cuda", torch.bfloat16)
report("model")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, foreach=True)
model.train()
for _ in range(3):
    ids = torch.randint(3, V, (2, 2048), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids
report("train_dsa_checkpointed_adamw")

model.gradient_checkpointing_disable()
model.config.use_cache = True
model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (1, 4096), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    del ids, loss
report("eval_no_grad_4096")

gen = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, eos_token_id=None, pad_token_id=0)
prompt = torch.randint(3, V, (2, 1536), device="cuda")
with torch.no_grad():
    out = model.generate(prompt, **gen)
    del out
report("generate_dynamic_indexed_cache")

with torch.no_grad():
    out = model.generate(prompt, cache_implementation="static", disable_compile=True, **gen)
    del out
report("generate_static_indexed_cache")
