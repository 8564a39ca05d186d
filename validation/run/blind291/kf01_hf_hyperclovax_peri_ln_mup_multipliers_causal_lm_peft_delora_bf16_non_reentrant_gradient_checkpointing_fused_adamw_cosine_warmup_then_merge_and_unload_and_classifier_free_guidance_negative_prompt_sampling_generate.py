"""peft DeLoRA (DeloraConfig, r=16, on every attention and MLP projection) on a HF
HyperCLOVAXForCausalLM (model_type "hyperclovax": peri-LN, post norms on each sublayer's output, and
muP-style embedding, residual, attention and logit multipliers) from a small HyperCLOVAXConfig (1024
wide, 8 layers, 16 heads with 4 KV heads, tied embeddings), bf16 weights, non-reentrant gradient
checkpointing with enable_input_require_grads, right-padded batches of 8 x 384 tokens with prompt
tokens masked to -100 in the labels, fused AdamW with a cosine schedule and warmup
(transformers.get_cosine_schedule_with_warmup), 3 steps; then the adapter merged into the weights
(merge_and_unload) and generate() with classifier-free guidance (guidance_scale 1.5: the unbatched
CFG logits processor runs a second forward per step over a left-padded negative prompt,
negative_prompt_ids with its attention mask, with its own KV cache), multinomial sampling (top_k 50,
top_p 0.9, temperature 0.8, repetition_penalty 1.1), fixed length (min_new_tokens ==
max_new_tokens), on a left-padded batch.

Phases: 0 model and adapter built; 1 first training step; 2 two more steps; 3 merge_and_unload and
optimizer freed; 4 guided sampling generate."""

import os

import torch
from peft import DeloraConfig, get_peft_model
from transformers import (
    GenerationConfig,
    HyperCLOVAXConfig,
    HyperCLOVAXForCausalLM,
    get_cosine_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2911)
if SMALL:
    config = HyperCLOVAXConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    B, S, NEW = 2, 32, 8
else:
    config = HyperCLOVAXConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
    )
    B, S, NEW = 8, 384, 48
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config.tie_word_embeddings = True
config.embedding_multiplier, config.residual_multiplier, config.logits_scaling = 10.0, 0.25, 0.125
config.attention_multiplier = 0.125
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = HyperCLOVAXForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
delora = DeloraConfig(
    r=16,
    delora_lambda=15,
    module_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, delora)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=2e-4, weight_decay=0.01, fused=device == "cuda"
)
scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=3)
report("built")

lengths = torch.linspace(S * 5 // 8, S, B).long()
prompt_len = torch.linspace(S // 8, S // 4, B).long()
model.train()
for step in range(3):
    ids = torch.randint(3, config.vocab_size, (B, S))
    pos = torch.arange(S)[None, :]
    mask = (pos < lengths[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill((mask == 0) | (pos < prompt_len[:, None]), -100)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    del out, ids, mask, labels
    if step == 0:
        report("step0")
report("steps1-2")

merged = model.merge_and_unload()
merged.gradient_checkpointing_disable()
merged.eval()
del model, optimizer, scheduler
report("merged")

prompts = torch.randint(3, config.vocab_size, (B, S // 4))
plen = torch.linspace(S // 8, S // 4, B).long()
attn = (torch.arange(S // 4)[None, :] >= (S // 4 - plen)[:, None]).long()
prompts = prompts * attn
negative = torch.randint(3, config.vocab_size, (B, S // 8))
nlen = torch.linspace(S // 32, S // 8, B).long()
neg_attn = (torch.arange(S // 8)[None, :] >= (S // 8 - nlen)[:, None]).long()
negative = negative * neg_attn
gen_cfg = GenerationConfig(
    do_sample=True,
    top_k=50,
    top_p=0.9,
    temperature=0.8,
    repetition_penalty=1.1,
    guidance_scale=1.5,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    pad_token_id=0,
    eos_token_id=2,
)
with torch.no_grad():
    seqs = merged.generate(
        input_ids=prompts.to(device), attention_mask=attn.to(device), generation_config=gen_cfg
    )
print("generated", tuple(seqs.shape))
report("generate")
