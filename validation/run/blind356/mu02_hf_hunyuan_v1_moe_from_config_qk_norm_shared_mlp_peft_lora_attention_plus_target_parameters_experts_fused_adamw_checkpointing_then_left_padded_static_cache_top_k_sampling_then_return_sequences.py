"""HF Hunyuan-A13B-style HunYuanMoEV1ForCausalLM built from a HunYuanMoEV1Config (random weights, sdpa),
reduced: 12 layers of 1,024, 16 query and 4 key/value heads of 64 with RMSNorm on queries and keys after
the rotary, every layer a MoE block of 16 SwiGLU experts of 1,024 (top 2, softmax router, renormalised)
plus a shared SwiGLU MLP of the same size, untied 128,000-token vocabulary, about 1 B parameters, in bf16.

PEFT LoRA (r=16, alpha 32) on q/k/v/o_proj of every layer plus `target_parameters` on every layer's fused 3-D
expert weights (mlp.experts.gate_up_proj and down_proj: PEFT's ParamWrapper adds the LoRA delta of all
16 experts to the weight inside each forward), HF gradient checkpointing (use_reentrant=False) with
enable_input_require_grads, `torch.optim.AdamW(fused=True)` over the adapters.

Phase 0: base model bf16. Phase 1: three LoRA steps on 4 x 1,024 with labels. Phase 2: top-k 40 sampling
(temperature 0.8, seeded) of 64 new tokens (min == max) from 6 left-padded prompts (lengths 200..700,
padded to 700) with cache_implementation="static" (disable_compile=True). Phase 3: the same prompts with the
default dynamic cache, num_return_sequences=2 (the prompts repeated to 12 rows), 48 new tokens. Seeded;
routing depends on values (random weights), the grouped_mm experts path sizes do not."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import HunYuanMoEV1Config, HunYuanMoEV1ForCausalLM

torch.manual_seed(35602)
V = 128000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = HunYuanMoEV1Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=1024,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    num_experts=16,
    moe_topk=2,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "sdpa"
model = HunYuanMoEV1ForCausalLM(cfg).to("cuda", torch.bfloat16)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model bf16")

lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=True)
model.train()
for step in range(3):
    ids = torch.randint(5, V, (4, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}")
    del loss, ids
report("phase1 lora attention + expert parameters, checkpointing, fused adamw, 3 x 4 x 1024")

model.eval()
lengths = [200, 300, 400, 500, 600, 700]
L = max(lengths)
ids = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
mask = torch.zeros(len(lengths), L, dtype=torch.long, device="cuda")
for i, n in enumerate(lengths):
    ids[i, L - n :] = torch.randint(5, V, (n,), device="cuda")
    mask[i, L - n :] = 1

torch.manual_seed(7)
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=True,
        top_k=40,
        temperature=0.8,
        cache_implementation="static",
        disable_compile=True,
    )
print(f"static sampled {tuple(gen.shape)}")
del gen
report("phase2 top-k sampling, left-padded 6 x 700 + 64, static cache")

torch.manual_seed(8)
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=48,
        min_new_tokens=48,
        do_sample=True,
        top_k=40,
        temperature=0.8,
        num_return_sequences=2,
    )
print(f"dynamic sampled {tuple(gen.shape)}")
del gen, ids, mask
report("phase3 top-k sampling, 6 x 2 return sequences x 700 + 48, dynamic cache")
