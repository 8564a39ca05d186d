"""Qwen3.5's hybrid MoE decoder (transformers 5.17's `Qwen3_5MoeForCausalLM`) from config, the way a user
without flash-linear-attention or causal-conv1d installed trains it: the Gated DeltaNet layers fall back
to transformers' reference PyTorch paths (`torch_chunk_gated_delta_rule` in chunks of 64 with float32
state, `torch_causal_conv1d_fn`), one gated full-attention layer (SDPA, 8 query and 2 KV heads of 256,
output gate, partial rotary) after every three linear ones; 8 layers of d 1,024, linear attention of 8
key and 16 value heads of 128, every MLP 32 routed experts of hidden 512 (top-4, grouped_mm, transformers'
default) plus a gated shared expert of 1,024, vocabulary 32,000. Pure bf16 full fine-tuning with
non-reentrant gradient checkpointing and the router's load-balancing loss (`output_router_logits=True`),
5 AdamW steps (foreach, bf16 states) of batch 4 x 2,048 tokens; then the optimizer is dropped and
`generate()` (greedy, min_new_tokens == max_new_tokens == 32) runs for 2 prompts of 1,024 tokens, the
hybrid cache keeping conv and recurrent states for the linear layers and keys/values for the attention
layers (single-token decode through `torch_recurrent_gated_delta_rule`). No value-dependent sizes.
3 phases."""

import torch
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

torch.manual_seed(2662)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3_5MoeTextConfig(
    vocab_size=32000,
    hidden_size=1024,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=8,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    num_experts=32,
    num_experts_per_tok=4,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=1024,
    output_router_logits=True,
    max_position_embeddings=4096,
    pad_token_id=0,
    eos_token_id=1,
)
model = Qwen3_5MoeForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("layer types", cfg.layer_types)
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
report("qwen3_5_moe_built_bf16")

model.train()
for step in range(5):
    ids = torch.randint(2, cfg.vocab_size, (4, 2048), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3), round(out.aux_loss.item(), 4))
report("full_fine_tune_torch_chunk_gated_delta_rule")

del opt, out
model.eval()
model.config.output_router_logits = False
prompts = torch.randint(2, cfg.vocab_size, (2, 1024), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=32,
        min_new_tokens=32,
        do_sample=False,
    )
print("generated", tuple(gen.shape))
report("generate_hybrid_recurrent_cache")
