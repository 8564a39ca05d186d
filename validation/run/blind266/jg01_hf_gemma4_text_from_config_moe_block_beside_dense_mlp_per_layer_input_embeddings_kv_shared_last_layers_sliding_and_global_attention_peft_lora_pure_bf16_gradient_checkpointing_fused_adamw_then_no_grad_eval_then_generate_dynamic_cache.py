"""A Gemma 4 text decoder (transformers 5.17's `Gemma4ForCausalLM`) built from config, the recent Gemma
family with a routed mixture-of-experts block beside the dense MLP (`enable_moe_block`: 16 experts of
hidden 512, top-4, grouped_mm experts, transformers' default), per-layer input embeddings (a packed
table of vocabulary x layers x 256 gated into every layer), the last 4 of 16 layers sharing the key and
value states of earlier layers (`num_kv_shared_layers`), sliding-window (512) and global attention
layers (SDPA), d 1,536, 8 query and 2 KV heads of 256 (global layers of 512), vocabulary 65,536, tied
embeddings. Pure bf16 weights; peft 0.21 LoRA (r 16, alpha 32, every attention and MLP projection),
non-reentrant gradient checkpointing; 6 fused AdamW steps of batch 4 x 1,024 tokens; a no_grad
evaluation of 2 batches; then `generate()` (greedy, dynamic cache, min_new_tokens == max_new_tokens
== 64) for 4 prompts of 512 tokens. No value-dependent sizes. 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

torch.manual_seed(2661)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Gemma4TextConfig(
    vocab_size=65536,
    vocab_size_per_layer_input=65536,
    hidden_size=1536,
    hidden_size_per_layer_input=256,
    intermediate_size=4096,
    num_hidden_layers=16,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    sliding_window=512,
    num_kv_shared_layers=4,
    enable_moe_block=True,
    num_experts=16,
    top_k_experts=4,
    moe_intermediate_size=512,
    max_position_embeddings=4096,
    final_logit_softcapping=30.0,
)
model = Gemma4ForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("layer types", model.config.layer_types)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=True)
report("gemma4_moe_lora_built_bf16")

model.train()
for step in range(6):
    ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_training")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
        print("eval", round(model(input_ids=ids, labels=ids).loss.item(), 3))
report("no_grad_eval")

del opt, loss
prompts = torch.randint(3, cfg.vocab_size, (4, 512), device="cuda")
out = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=64,
    min_new_tokens=64,
    do_sample=False,
    pad_token_id=0,
)
print("generated", tuple(out.shape))
report("generate_dynamic_cache")
