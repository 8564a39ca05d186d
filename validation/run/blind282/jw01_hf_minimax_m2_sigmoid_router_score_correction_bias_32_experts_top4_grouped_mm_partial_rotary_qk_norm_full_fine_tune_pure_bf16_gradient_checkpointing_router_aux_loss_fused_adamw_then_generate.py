"""A MiniMax-M2 style decoder (transformers 5.17's `MiniMaxM2ForCausalLM`) built from config: a sparse
mixture-of-experts LLM whose router is a sigmoid over 32 experts with a score-correction bias for the top-4
choice (the DeepSeek-V3 style "aux-loss-free" router; transformers' default grouped_mm experts), partial
rotary embeddings (half of each 64-wide head), RMSNorm on queries and keys across heads, GQA (16 query and
4 KV heads), d 1,024, 12 layers, experts of hidden 512, vocabulary 32,768, untied head. Pure bf16 weights,
full fine-tuning with non-reentrant gradient checkpointing, `output_router_logits=True` (the load-balancing
auxiliary loss added to the LM loss), gradient clipping, 5 fused AdamW steps at batch 4 x 1,024; a no_grad
evaluation of 2 batches; then `generate()` (greedy, dynamic cache, min_new_tokens == max_new_tokens == 48)
for 4 prompts of 384 tokens. No value-dependent sizes. 4 phases."""

import torch
from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

torch.manual_seed(2821)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = MiniMaxM2Config(
    vocab_size=32768,
    hidden_size=1024,
    intermediate_size=512,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    num_local_experts=32,
    num_experts_per_tok=4,
    max_position_embeddings=4096,
    output_router_logits=True,
    router_aux_loss_coef=0.001,
    rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "partial_rotary_factor": 0.5},
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = MiniMaxM2ForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
report("minimax_m2_built_bf16")

model.train()
for step in range(5):
    ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3), round(out.aux_loss.item(), 4))
del out
report("full_fine_tune")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
        print("eval", round(model(input_ids=ids, labels=ids).loss.item(), 3))
report("no_grad_eval")

del opt
model.config.output_router_logits = False
prompts = torch.randint(3, cfg.vocab_size, (4, 384), device="cuda")
gen = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=48,
    min_new_tokens=48,
    do_sample=False,
    pad_token_id=0,
)
print("generated", tuple(gen.shape))
report("generate_dynamic_cache")
