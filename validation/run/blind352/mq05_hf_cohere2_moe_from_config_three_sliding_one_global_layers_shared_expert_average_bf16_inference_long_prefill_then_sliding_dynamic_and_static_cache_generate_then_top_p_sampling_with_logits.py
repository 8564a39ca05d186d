"""HF Cohere2-MoE (Cohere2MoeForCausalLM from a Cohere2MoeConfig, random weights, bf16, sdpa), inference
only: 8 layers of 1024 in Cohere2's pattern of three sliding-window layers (window 512, rotary) then one
global layer without rotary, the first layer a dense SwiGLU MLP (first_k_dense_replace=1) and the other
seven MoE (16 experts of 1024, top 2 with softmax routing and renormalised weights, plus one shared
expert averaged in), the default experts implementation; 16 query and 4 key/value heads of 64,
parallel attention/MLP blocks with a LayerNorm, logit scale 0.0625, tied 256,000-token vocabulary.

Phase 0: the model in bf16. Phase 1: scoring prefill of 2 x 4096 under inference_mode with
logits_to_keep=1 (sliding masks for three layers in four). Phase 2: greedy generate() of 128 new tokens
(min == max) from 4 prompts of 1024 with the default dynamic cache (sliding layers keep their last 511
positions). Phase 3: the same with cache_implementation="static" (static sliding-window layers of the
window and full static layers of the whole length; disable_compile=True). Phase 4: top-p 0.9 sampling
of 64 tokens from 8 prompts of 512, return_dict_in_generate with output_logits=True (every step's raw
bf16 logits kept). Seeded; routing depends on values (random weights), no other size does."""

import torch
from transformers import Cohere2MoeConfig, Cohere2MoeForCausalLM

torch.manual_seed(35205)
V = 256000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Cohere2MoeConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=1024,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    sliding_window=512,
    sliding_window_pattern=4,
    num_experts=16,
    num_experts_per_tok=2,
    num_shared_experts=1,
    shared_expert_combination_strategy="average",
    prefix_dense_intermediate_size=2816,
    first_k_dense_replace=1,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=5,
    eos_token_id=255001,
)
cfg._attn_implementation = "sdpa"
model = Cohere2MoeForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
print(f"layer types {cfg.layer_types}, mlp layer types {cfg.mlp_layer_types}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model bf16")

with torch.inference_mode():
    ids = torch.randint(6, 250000, (2, 4096), device="cuda")
    logits = model(input_ids=ids, logits_to_keep=1, use_cache=False).logits
    print(f"prefill logits {tuple(logits.shape)} {logits.dtype}")
    del logits, ids
report("phase1 prefill 2 x 4096 inference_mode, logits_to_keep=1")

prompts = torch.randint(6, 250000, (4, 1024), device="cuda")


def greedy(prompts, **kwargs):
    with torch.inference_mode():
        return model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=128,
            min_new_tokens=128,
            do_sample=False,
            **kwargs,
        )


gen = greedy(prompts)
print(f"dynamic: {tuple(gen.shape)}")
del gen
report("phase2 greedy generate 4 x 1024 + 128, dynamic sliding cache")

gen = greedy(prompts, cache_implementation="static", disable_compile=True)
print(f"static: {tuple(gen.shape)}")
del gen, prompts
report("phase3 greedy generate 4 x 1024 + 128, static sliding cache")

prompts = torch.randint(6, 250000, (8, 512), device="cuda")
with torch.inference_mode():
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=True,
        top_p=0.9,
        top_k=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
print(f"sampled: {tuple(out.sequences.shape)}, {len(out.logits)} x {tuple(out.logits[0].shape)}")
del out, prompts
report("phase4 top-p sampling 8 x 512 + 64, logits returned")
