"""An ERNIE 4.5 mixture-of-experts decoder (transformers 5.17's `Ernie4_5_MoeForCausalLM`, the 21B-A3B layout
scaled down) built from config: 12 layers of d 2,048 (16 query / 4 KV heads of 128, RoPE, SDPA), the first
layer a dense SwiGLU MLP of 6,144, the other 11 sparse blocks of 64 SwiGLU experts of 512 (top-6 by a softmax
router with ERNIE's `moe_statics` score-correction bias, transformers' default grouped_mm experts) plus 2
shared experts (one 1,024 SwiGLU), vocabulary 103,424 tied. Pure bf16 weights, peft 0.21 LoRA (r 16, alpha 32)
on the attention projections and the 11 routers trained whole (`modules_to_save`), non-reentrant gradient
checkpointing, `output_router_logits` (the load-balancing aux loss added to the LM loss): 5 AdamW steps of
batch 4 x 1,024 (a padded batch: the last two rows right-padded by 128 and 256 tokens, labels -100 there); a
no_grad evaluation of 2 batches; then greedy `generate()` (dynamic KV cache, min_new_tokens == max_new_tokens
== 48, `output_router_logits=False`: with it, the first decode step's load-balancing loss broadcasts 4 router
rows against the 4 x 385 mask and raises) for 4 prompts of 384 tokens. Seeded, no value-dependent sizes. 4
phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

torch.manual_seed(2771)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Ernie4_5_MoeConfig(
    vocab_size=103424,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    moe_intermediate_size=512,
    moe_k=6,
    moe_num_experts=64,
    moe_num_shared_experts=2,
    moe_layer_start_index=1,
    output_router_logits=True,
    router_aux_loss_coef=0.001,
    tie_word_embeddings=True,
    pad_token_id=0,
)
model = Ernie4_5_MoeForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    modules_to_save=["gate"],  # the routers (with their moe_statics bias) trained whole
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, weight_decay=0.0)
report("ernie4_5_moe_lora_built_bf16")

B, T = 4, 1024
PAD = [0, 0, 128, 256]


def batch():
    ids = torch.randint(3, cfg.vocab_size, (B, T), device="cuda")
    mask = torch.ones(B, T, dtype=torch.long, device="cuda")
    for r, p in enumerate(PAD):
        if p:
            ids[r, T - p :] = cfg.pad_token_id
            mask[r, T - p :] = 0
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


model.train()
for step in range(5):
    ids, mask, labels = batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3), round(out.aux_loss.item(), 4))
del out
report("lora_moe_training_aux_loss")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids, mask, labels = batch()
        print("eval", round(model(input_ids=ids, attention_mask=mask, labels=labels).loss.item(), 3))
report("no_grad_eval")

del opt
prompts = torch.randint(3, cfg.vocab_size, (4, 384), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=48,
        min_new_tokens=48,
        pad_token_id=cfg.pad_token_id,
        eos_token_id=None,
        output_router_logits=False,  # the aux loss of a decode step against the full mask raises
    )
print("generated", tuple(gen.shape))
report("generate_dynamic_cache")
