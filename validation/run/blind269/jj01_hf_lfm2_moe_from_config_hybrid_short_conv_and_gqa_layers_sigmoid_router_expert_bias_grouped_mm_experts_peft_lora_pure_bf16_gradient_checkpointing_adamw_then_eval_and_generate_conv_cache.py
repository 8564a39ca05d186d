"""An LFM2-MoE (Liquid AI's hybrid LFM2-8B-A1B family) from config, fine-tuned with peft LoRA and then
sampled with `generate()`: 16 layers of d 1,536, twelve gated short-convolution blocks (`in_proj` to
3 d, a depthwise causal conv of 3 taps, `out_proj`; the torch path, as neither causal_conv1d nor the
kernels hub is installed) and four GQA attention layers (24 query and 8 KV heads of 64, QK-norm),
the first two layers with a dense SwiGLU MLP of 6,144 and the other fourteen with a sparse block of
32 experts of 768 (sigmoid router plus a float32 expert-bias buffer, top-4 renormalised, the 3-D
expert weights through transformers' default experts implementation), vocabulary 65,536 tied. Pure
bf16 weights; peft 0.21 LoRA (r 16, alpha 32) on the attention, conv and dense projections, the
experts frozen; non-reentrant gradient checkpointing; 6 AdamW steps on 4 x 2,048 tokens; a no_grad
evaluation of 4 x 2,048; then `generate()` from 4 prompts of 256 tokens, 64 new tokens sampled
(top-k 50, min_new_tokens == max_new_tokens) with the hybrid conv-state / KV cache. 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Lfm2MoeConfig

torch.manual_seed(2691)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


layer_types = ["conv", "conv", "full_attention", "conv"] * 4
cfg = Lfm2MoeConfig(
    vocab_size=65536,
    hidden_size=1536,
    intermediate_size=6144,
    moe_intermediate_size=768,
    num_hidden_layers=16,
    num_attention_heads=24,
    num_key_value_heads=8,
    num_experts=32,
    num_experts_per_tok=4,
    num_dense_layers=2,
    layer_types=layer_types,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).cuda()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
report("lfm2_moe_lora_built_bf16")

B, T = 4, 2048
model.train()
for step in range(6):
    ids = torch.randint(3, cfg.vocab_size, (B, T), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_training")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, cfg.vocab_size, (B, T), device="cuda")
    print("eval", round(model(input_ids=ids, labels=ids).loss.item(), 3))
report("no_grad_eval")

del opt, loss
prompts = torch.randint(3, cfg.vocab_size, (4, 256), device="cuda")
with torch.no_grad():
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_k=50,
        max_new_tokens=64,
        min_new_tokens=64,
        pad_token_id=0,
    )
print("generated", tuple(out.shape), out[0, -8:].tolist())
report("generate_hybrid_cache")
