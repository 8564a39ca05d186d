"""dots.llm1 (transformers 5.17's `Dots1ForCausalLM`) built from config: a DeepSeek-V3-style mixture of
experts (sigmoid router with a score-correction bias, 32 routed experts of hidden 512, top-4, one shared
expert, the first layer dense with an MLP of 2,816; transformers' default grouped_mm experts), RMSNorm on
queries and keys per head, GQA with 16 query and 4 KV heads of 64, d 1,024, 8 layers, the Qwen2 vocabulary of
152,064, untied head. Pure bf16 weights. Phase 1: peft VB-LoRA (`VBLoRAConfig`: one shared bank of 2,048
vectors of length 256, rank 4, each sub-vector a softmax mix of its top-2 bank vectors) on the attention
projections and the shared experts, non-reentrant gradient checkpointing with `enable_input_require_grads`,
AdamW (default foreach) on the bank and logits only, 5 steps at batch 4 x 1,024. Phase 2: sampling with the
adapter on: `generate(do_sample=True, top_k=50, temperature=0.8, renormalize_logits=True,
num_return_sequences=4, return_dict_in_generate=True, output_logits=True)` for 2 prompts of 512 tokens, 48 new
tokens (min == max), every step's raw logits kept. Phase 3: greedy
`generate(cache_implementation="offloaded")` for 2 prompts of 3,072 tokens, 32 new tokens. Seeded; the sampled
tokens' values aside, no value-dependent sizes. 4 phases (phase 0 the build)."""

import torch
from peft import VBLoRAConfig, get_peft_model
from transformers import Dots1Config, Dots1ForCausalLM

torch.manual_seed(2874)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Dots1Config(
    vocab_size=152064,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    n_routed_experts=32,
    num_experts_per_tok=4,
    n_shared_experts=1,
    first_k_dense_replace=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
base = Dots1ForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
vb = VBLoRAConfig(
    task_type="CAUSAL_LM",
    r=4,
    num_vectors=2048,
    vector_length=256,
    topk=2,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
)
model = get_peft_model(base, vb)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
report("dots1_built_bf16")

model.train()
for step in range(5):
    ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3))
del out, ids
report("vblora_fine_tune")

del opt
model.eval()
prompts = torch.randint(3, cfg.vocab_size, (2, 512), device="cuda")
with torch.no_grad():
    res = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_k=50,
        temperature=0.8,
        renormalize_logits=True,
        num_return_sequences=4,
        return_dict_in_generate=True,
        output_logits=True,
        max_new_tokens=48,
        min_new_tokens=48,
    )
print("sampled", tuple(res.sequences.shape), len(res.logits), tuple(res.logits[0].shape))
del res
report("sample_num_return_sequences_output_logits")

prompts = torch.randint(3, cfg.vocab_size, (2, 3072), device="cuda")
with torch.no_grad():
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        cache_implementation="offloaded",
        do_sample=False,
        max_new_tokens=32,
        min_new_tokens=32,
    )
print("offloaded greedy", tuple(out.shape))
report("offloaded_cache_long_prompt")
