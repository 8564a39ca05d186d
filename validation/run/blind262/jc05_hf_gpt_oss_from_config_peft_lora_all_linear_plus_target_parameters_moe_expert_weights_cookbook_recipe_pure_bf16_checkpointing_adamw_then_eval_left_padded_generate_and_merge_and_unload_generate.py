"""GPT-OSS fine-tuning as in OpenAI's cookbook recipe, with PEFT: LoRA r 8 / alpha 16 on every linear
layer (target_modules="all-linear": q/k/v/o; the router is no nn.Linear) plus `target_parameters` on the MoE
experts' fused 3-D weights (mlp.experts.gate_up_proj and down_proj of three chosen layers: PEFT's
ParamWrapper adds B@A onto the whole expert tensor at every forward). GptOssForCausalLM from a config
(random weights, bf16; attention sinks, alternating sliding window 256 / full attention, eager
attention): 8 layers of 1024, 16 heads of 64, 4 KV heads, 16 experts of 1024 (top 4, clamped
SwiGLU), vocabulary 32,000.
Phase 1: HF non-reentrant gradient checkpointing, AdamW (foreach) over the adapters, batch 4 x 1024,
3 steps. Phase 2: eval loss under no_grad at 2 x 2048. Phase 3: greedy generate() of 32 tokens for a
left-padded batch of 3 prompts (700, 512, 200 tokens) with the adapters active. Phase 4:
merge_and_unload() (the adapters folded into the base weights) then the same generate(). 4 phases
after the model's."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import GptOssConfig, GptOssForCausalLM

torch.manual_seed(26205)
V = 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = GptOssConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=1024,
    head_dim=64,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    num_local_experts=16,
    num_experts_per_tok=4,
    sliding_window=256,
    max_position_embeddings=131072,
    pad_token_id=0,
    eos_token_id=2,
)
model = GptOssForCausalLM(cfg).to("cuda", torch.bfloat16)
report("model")

lora = LoraConfig(
    r=8,
    lora_alpha=16,
    target_modules="all-linear",
    target_parameters=[
        f"{i}.mlp.experts.{name}" for i in (3, 5, 7) for name in ("gate_up_proj", "down_proj")
    ],
)
model = get_peft_model(model, lora)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, foreach=True)
model.train()
for _ in range(3):
    ids = torch.randint(3, V, (4, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids
report("train_lora_experts_checkpointing_adamw")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (2, 2048), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    del ids, loss
report("eval_no_grad_2048")

lengths = [700, 512, 200]
width = max(lengths)
ids = torch.zeros(len(lengths), width, dtype=torch.long)
mask = torch.zeros(len(lengths), width, dtype=torch.long)
for i, n in enumerate(lengths):
    ids[i, width - n :] = torch.randint(3, V, (n,))
    mask[i, width - n :] = 1
ids, mask = ids.cuda(), mask.cuda()
gen = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, eos_token_id=None, pad_token_id=0)
with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask, **gen)
    del out
report("generate_with_adapters")

del opt
model = model.merge_and_unload()
with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask, **gen)
    del out
report("merge_and_unload_generate")
