"""HF GLM-4.7-Flash-style Glm4MoeLiteForCausalLM built from a Glm4MoeLiteConfig (random weights, sdpa): 12
layers of 1,024, multi-head latent attention (16 heads, q LoRA rank 384, kv LoRA rank 256, nope/rope
query-key dims 96/32, value dim 128, interleaved rope), the first layer a dense SwiGLU MLP of 2,816 and the
other eleven MoE blocks (32 routed experts of 512, top 4 with a sigmoid router plus correction bias and
renormalised, scaled weights, plus one shared expert), the default experts implementation (grouped_mm),
untied 154,880-token vocabulary, about 0.9 B parameters.

Phase 0: the model in pure bf16. Phase 1: three full fine-tuning steps in pure bf16 (no autocast, no fp32
master) with `torch.optim.AdamW(fused=True)` and HF gradient checkpointing (use_reentrant=False) on
4 x 1,024 tokens with labels (the loss upcasts the full-vocabulary logits). Phase 2: no_grad eval of
2 x 2,048 tokens, loss only. Phase 3: greedy generate() of 96 new tokens (min == max) from 4 prompts of 512
with the default dynamic cache, which for this attention keeps the compressed latent (256) and the shared
rope key (32) per position instead of per-head keys and values. Seeded; expert routing depends on values
(random weights) but the grouped_mm path sorts all tokens x top-k rows, so no size depends on it."""

import torch
from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

torch.manual_seed(35601)
V = 154880


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Glm4MoeLiteConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=16,
    n_shared_experts=1,
    n_routed_experts=32,
    num_experts_per_tok=4,
    kv_lora_rank=256,
    q_lora_rank=384,
    qk_rope_head_dim=32,
    qk_nope_head_dim=96,
    v_head_dim=128,
    max_position_embeddings=4096,
    pad_token_id=2,
    bos_token_id=0,
    eos_token_id=1,
)
cfg._attn_implementation = "sdpa"
model = Glm4MoeLiteForCausalLM(cfg).to("cuda", torch.bfloat16)
print(f"mlp layer types {cfg.mlp_layer_types}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model pure bf16")

model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1, fused=True)
for step in range(3):
    ids = torch.randint(3, V, (4, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}")
    del loss, ids
report("phase1 pure bf16 fused adamw, gradient checkpointing, 3 steps of 4 x 1024")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (2, 2048), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    print(f"eval loss {loss.item():.3f}")
    del loss, ids
report("phase2 no_grad eval 2 x 2048")

model.config.use_cache = True
prompts = torch.randint(3, V, (4, 512), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=96,
        min_new_tokens=96,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, prompts
report("phase3 greedy generate 4 x 512 + 96, latent dynamic cache")
