"""HF GraniteMoeSWAForCausalLM (Granite-4-style MoE with sliding-window layers, from a GraniteMoeSWAConfig,
random weights, fp32 master weights): 12 layers of 1,024, 16 query and 4 key/value heads of 64, the
default layer pattern (one full-attention layer then three sliding-window layers of 256), per-layer RoPE
theta given as `layer_rope_theta` (0 = NoPE on the full-attention layers, 10,000 on the sliding ones),
24 experts of 512 top 4 plus a shared SwiGLU expert of 1,024 on every layer, Granite's embedding/residual/
attention multipliers and logits scaling, tied 100,352-token vocabulary, about 0.6 B parameters. The model
class declares no sdpa support (`_supports_sdpa = False`), so it runs transformers' eager attention.

Phase 0: the model in fp32. Phase 1: three training steps under bf16 autocast with
`torch.optim.AdamW(fused=True)` on the fp32 weights, HF gradient checkpointing (use_reentrant=False),
a right-padded batch of 4 sequences of fixed lengths 640..1,536 (labels -100 on the padding), clipping at
1.0. The experts' weights stay fp32 under autocast and transformers casts the routed rows to the weight dtype
before `F.grouped_mm`, so the experts run PyTorch's fp32 grouped-mm fallback (offsets read on the host, one
mm per expert into the output's slices) instead of CUTLASS's bf16 kernel. (output_router_logits=True is
not used: in transformers 5.17 this model records no router logits and the aux loss fails.) Phase 2:
no_grad autocast eval of the same padded batch (full logits and loss). Phase 3: greedy generate() of 64 new
tokens (min == max) from 4 left-padded prompts (lengths 400..1,000, padded to 1,000) in bf16 autocast with
the default dynamic cache (sliding layers keep their window). Seeded; routing depends on values (random
weights); the fallback's sizes do not, only the number of rows each expert's mm takes."""

import torch
from transformers import GraniteMoeSWAConfig, GraniteMoeSWAForCausalLM

torch.manual_seed(35604)
V = 100352


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


layers = 12
layer_types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(layers)]
cfg = GraniteMoeSWAConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=512,
    num_hidden_layers=layers,
    num_attention_heads=16,
    num_key_value_heads=4,
    num_local_experts=24,
    num_experts_per_tok=4,
    shared_intermediate_size=1024,
    sliding_window=256,
    layer_types=layer_types,
    layer_rope_theta=[0 if t == "full_attention" else 10000.0 for t in layer_types],
    embedding_multiplier=12.0,
    residual_multiplier=0.22,
    attention_multiplier=0.015625,
    logits_scaling=8.0,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "eager"
model = GraniteMoeSWAForCausalLM(cfg).to("cuda")
print(f"layer types {cfg.layer_types}, rope thetas {cfg.layer_rope_theta}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model fp32")

lengths = [640, 896, 1152, 1536]
L = max(lengths)


def batch():
    ids = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
    mask = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, V, (n,), device="cuda")
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
for _ in range(3):
    ids, mask, labels = batch()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids, mask, labels
report("phase1 bf16 autocast fused adamw, checkpointing, right-padded 4 x 1536")

model.eval()
ids, mask, labels = batch()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    print(f"eval logits {tuple(out.logits.shape)} {out.logits.dtype}")
    del out
del ids, mask, labels
report("phase2 no_grad autocast eval, eager attention, 4 x 1536")

model.config.use_cache = True
lengths = [400, 600, 800, 1000]
L = max(lengths)
ids = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
mask = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
for i, n in enumerate(lengths):
    ids[i, L - n :] = torch.randint(3, V, (n,), device="cuda")
    mask[i, L - n :] = 1
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=False,
    )
print(f"greedy {tuple(gen.shape)}")
del gen, ids, mask
report("phase3 greedy generate, left-padded 4 x 1000 + 64, bf16 autocast, dynamic sliding cache")
