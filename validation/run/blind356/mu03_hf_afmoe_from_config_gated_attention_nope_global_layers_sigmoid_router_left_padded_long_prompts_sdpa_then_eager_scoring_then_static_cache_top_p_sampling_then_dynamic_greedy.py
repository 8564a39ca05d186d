"""HF AFMoE (Arcee Trinity-style AfmoeForCausalLM from an AfmoeConfig, random weights, bf16), inference only:
12 layers of 1,024, 16 query and 4 key/value heads of 64 with q/k RMSNorm and a sigmoid output gate
(gate_proj), three sliding-window layers (window 512, rotary) then one global layer without rotary (NoPE),
pre and post norms around attention and MLP, the first layer a dense SwiGLU MLP of 2,816 and the other
eleven MoE blocks (32 experts of 512, top 4 by sigmoid score plus a bias, renormalised, plus one shared
expert), the default experts implementation (grouped_mm), untied 200,192-token vocabulary, ~1 B parameters.

Phase 0: the model in bf16. Phase 1: sdpa scoring of 4 left-padded prompts (lengths 1,500..3,000, padded
to 3,000) under inference_mode with logits_to_keep=256 and the log-probabilities of those positions (fp32
log_softmax). Phase 2: the same after model.set_attn_implementation("eager") (explicit fp32-softmax
attention weights per layer, sliding masks). Phase 3: back to sdpa, top-p 0.9 sampling (temperature 0.7,
seeded) of 64 new tokens (min == max) from 4 left-padded prompts (600..1,200) with
cache_implementation="static" (disable_compile=True). Phase 4: greedy, default dynamic cache, 8 prompts of
1,024 + 64. Seeded; routing depends on values (random weights), the grouped_mm sizes do not."""

import torch
from transformers import AfmoeConfig, AfmoeForCausalLM

torch.manual_seed(35603)
V = 200192


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = AfmoeConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_hidden_layers=12,
    num_dense_layers=1,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    num_experts=32,
    num_experts_per_tok=4,
    num_shared_experts=1,
    global_attn_every_n_layers=4,
    sliding_window=512,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "sdpa"
model = AfmoeForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
print(f"layer types {cfg.layer_types}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model bf16")


def left_padded(lengths):
    L = max(lengths)
    ids = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
    mask = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
    for i, n in enumerate(lengths):
        ids[i, L - n :] = torch.randint(3, V, (n,), device="cuda")
        mask[i, L - n :] = 1
    return ids, mask


ids, mask = left_padded([1500, 2000, 2500, 3000])


def score(ids, mask):
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=256, use_cache=False).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
        picked = logp[:, :-1].gather(-1, ids[:, -255:].unsqueeze(-1)).squeeze(-1)
        return logits.shape, picked.sum(dim=-1)


shape, total = score(ids, mask)
print(f"sdpa logits {tuple(shape)}, log-prob sums {total.tolist()}")
report("phase1 sdpa scoring 4 x 3000 left-padded, logits_to_keep=256")

model.set_attn_implementation("eager")
shape, total = score(ids, mask)
print(f"eager logits {tuple(shape)}, log-prob sums {total.tolist()}")
del ids, mask
report("phase2 eager scoring 4 x 3000 left-padded, logits_to_keep=256")

model.set_attn_implementation("sdpa")
ids, mask = left_padded([600, 800, 1000, 1200])
torch.manual_seed(11)
with torch.inference_mode():
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=True,
        top_p=0.9,
        top_k=0,
        temperature=0.7,
        cache_implementation="static",
        disable_compile=True,
    )
print(f"static sampled {tuple(gen.shape)}")
del gen, ids, mask
report("phase3 top-p sampling 4 x 1200 left-padded + 64, static sliding cache")

prompts = torch.randint(3, V, (8, 1024), device="cuda")
with torch.inference_mode():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=False,
    )
print(f"dynamic greedy {tuple(gen.shape)}")
del gen, prompts
report("phase4 greedy generate 8 x 1024 + 64, dynamic sliding cache")
