"""HF MiMo-V2-Flash (MiMoV2FlashForCausalLM from a MiMoV2FlashConfig, random weights, bf16). Its attention has
no sdpa path (attention sinks): the eager attention runs everywhere, with a bf16 softmax over the scores plus
one learned sink logit per head on the sliding-window layers. 12 layers of 1,024: full attention on layers
0, 5 and 11, sliding window 256 elsewhere; 16 query heads, 2 key/value heads on full layers and twice that on
sliding ones, query/key head dim 192 and value head dim 128 (asymmetric), values scaled by 0.707, partial
rotary (a third of the head dim) with per-layer-type theta; layer 0 a dense SwiGLU MLP of 2,816 and the
others MoE (32 experts of 512, top 4, sigmoid router with correction bias), grouped_mm experts, untied
152,576-token vocabulary, about 1 B parameters.

Phase 0: the model in pure bf16. Phase 1: two full fine-tuning steps, pure bf16, `AdamW(fused=True)`, no
gradient checkpointing (the eager attention saves its probabilities), 2 x 1,024 with labels. Phase 2:
no_grad eval at 2 x 2,048, logits_to_keep=1. Phase 3: sampling (top-k 50, repetition penalty 1.1, seeded) of
64 new tokens (min == max) from 4 prompts of 768, default dynamic cache (sliding layers keep their window).
Phase 4: greedy, cache_implementation="static" (disable_compile=True), 4 prompts of 768 + 64. Seeded;
routing depends on values (random weights), the grouped_mm sizes do not."""

import torch
from transformers import MiMoV2FlashConfig, MiMoV2FlashForCausalLM

torch.manual_seed(35605)
V = 152576


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = MiMoV2FlashConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=192,
    v_head_dim=128,
    n_routed_experts=32,
    num_experts_per_tok=4,
    sliding_window=256,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = MiMoV2FlashForCausalLM(cfg).to("cuda", torch.bfloat16)
print(f"attention {cfg._attn_implementation}, layer types {cfg.layer_types}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model pure bf16")

model.train()
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
for _ in range(2):
    ids = torch.randint(3, V, (2, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids
report("phase1 pure bf16 fused adamw, eager attention with sinks, 2 steps of 2 x 1024")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (2, 2048), device="cuda")
    logits = model(input_ids=ids, logits_to_keep=1).logits
    print(f"eval logits {tuple(logits.shape)}")
    del logits, ids
report("phase2 no_grad eval 2 x 2048, logits_to_keep=1")

model.config.use_cache = True
prompts = torch.randint(3, V, (4, 768), device="cuda")
torch.manual_seed(13)
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=True,
        top_k=50,
        repetition_penalty=1.1,
    )
print(f"dynamic sampled {tuple(gen.shape)}")
del gen
report("phase3 top-k sampling, repetition penalty, 4 x 768 + 64, dynamic cache")

with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,
    )
print(f"static greedy {tuple(gen.shape)}")
del gen, prompts
report("phase4 greedy 4 x 768 + 64, static cache")
