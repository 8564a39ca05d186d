"""HF DeepSeek-V4 (DeepseekV4ForCausalLM built with AutoModelForCausalLM.from_config(config,
dtype=torch.bfloat16), random weights, eager attention: the only one V4 supports). Six layers of 1024
cycling through the three attention kinds (sliding window 128; sliding + compressed sparse attention,
every 4 tokens compressed into one entry and a lightning indexer of 8 heads of 64 keeping the top 64;
sliding + heavily compressed attention, one entry per 128 tokens), shared-KV multi-query attention of
16 heads of 128 (half of it rotary) with per-head sinks and a grouped low-rank output projection (4
groups of 256), manifold-constrained hyper-connections (4 residual streams, 20 Sinkhorn iterations),
two hash-routed MoE layers then four top-k MoE layers (16 routed experts of 512, top 4, sqrt-softplus
router, one shared expert), vocabulary 32,000. from_config with a dtype keeps the modules V4 lists in
_keep_in_fp32_modules_strict (the mHC mixers, norms, sinks, position biases) in fp32.

Phase 1: three training steps at batch 2 x 1024 with output_router_logits=True (the load-balancing aux
loss added to the LM loss), AdamW (foreach, weight decay 0.1), clip_grad_norm_ 1.0. Phase 2: eval under
no_grad at 1 x 2048. Phase 3: greedy generate() of 48 new tokens (min_new_tokens == max_new_tokens) from
2 prompts of 512 tokens with V4's dynamic cache (sliding windows plus the compressors' buffers and
compressed entries). Seeded; no sizes depend on values."""

import torch
from transformers import AutoModelForCausalLM, DeepseekV4Config

torch.manual_seed(35201)
V = 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


kinds = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
cfg = DeepseekV4Config(
    vocab_size=V,
    hidden_size=1024,
    moe_intermediate_size=512,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=1,
    head_dim=128,
    q_lora_rank=384,
    num_experts_per_tok=4,
    n_routed_experts=16,
    n_shared_experts=1,
    layer_types=kinds * 2,
    mlp_layer_types=["hash_moe"] * 2 + ["moe"] * 4,
    sliding_window=128,
    o_groups=4,
    o_lora_rank=256,
    index_n_heads=8,
    index_head_dim=64,
    index_topk=64,
    hc_mult=4,
    partial_rotary_factor=0.5,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "eager"
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).to("cuda")
n = sum(p.numel() for p in model.parameters())
n32 = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
print(f"parameters: {n:,} ({n32:,} kept in fp32)")
report("phase0 model")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
model.train()
for step in range(3):
    ids = torch.randint(3, V, (2, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids, output_router_logits=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: loss {out.loss.item():.3f} aux {out.aux_loss.item():.3f}")
    del out, ids
report("phase1 train 3 steps, router aux loss, adamw")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (1, 2048), device="cuda")
    logits = model(input_ids=ids, use_cache=False).logits
    print(f"eval logits {tuple(logits.shape)} {logits.dtype}")
    del logits, ids
report("phase2 eval 1 x 2048 no_grad")

prompts = torch.randint(3, V, (2, 512), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=48,
        min_new_tokens=48,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, prompts
report("phase3 greedy generate 2 x 512 + 48, dynamic compressor caches")
