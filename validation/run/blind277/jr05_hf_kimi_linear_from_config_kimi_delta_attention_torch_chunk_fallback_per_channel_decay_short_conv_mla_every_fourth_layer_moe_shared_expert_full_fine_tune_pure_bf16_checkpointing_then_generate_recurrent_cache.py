"""A Kimi Linear hybrid decoder (transformers 5.17's `KimiLinearForCausalLM`, the Kimi-Linear-48B-A3B layout
scaled down) built from config: 12 layers of d 2,048 in the 3:1 pattern -- 9 Kimi Delta Attention layers (16
heads of 128, the depthwise short convolution of 4, per-channel forget gates; the GPU machine has neither
flash-linear-attention nor causal-conv1d nor `kernels`, so transformers' torch fallbacks run: the chunked KDA
of 64 whose (batch, heads, chunks, 64, 64, 128) fp32 decay masks and products are the big tensors, the
row-by-row intra-chunk solve and the inter-chunk loop) and 3 multi-head latent attention layers (16 heads, KV
LoRA rank 512, qk 128 + 64 rope, v 128, SDPA); the first layer a dense SwiGLU MLP of 6,144, the other 11 MoE
blocks of 64 SwiGLU experts of 512 (top-6, sigmoid router with a score-correction bias, routed scaling 2.446,
transformers' default grouped_mm experts) plus a shared expert; vocabulary 163,840, untied. Pure bf16 full
fine-tune with non-reentrant gradient checkpointing and clipping: 4 AdamW steps of batch 2 x 2,048; a no_grad
evaluation of one batch; then greedy `generate()` (the hybrid cache: conv and recurrent states for the KDA
layers, the MLA layers' keys and values; min_new_tokens == max_new_tokens == 32, decode through the recurrent
KDA fallback) for 2 prompts of 512. Seeded, no value-dependent sizes. 4 phases."""

import torch
from transformers import KimiLinearConfig, KimiLinearForCausalLM

torch.manual_seed(2775)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


K, F = "linear_attention", "full_attention"
cfg = KimiLinearConfig(
    vocab_size=163840,
    hidden_size=2048,
    intermediate_size=6144,
    moe_intermediate_size=512,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=16,
    n_shared_experts=1,
    num_local_experts=64,
    num_experts_per_tok=6,
    kv_lora_rank=512,
    q_lora_rank=None,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    linear_num_heads=16,
    linear_head_dim=128,
    linear_conv_kernel_dim=4,
    layer_types=[K, K, K, F] * 3,
    mlp_layer_types=["dense"] + ["sparse"] * 11,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = KimiLinearForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1)
report("kimi_linear_built_bf16")

B, T = 2, 2048
model.train()
for step in range(4):
    ids = torch.randint(3, cfg.vocab_size, (B, T), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
del loss
report("full_fine_tune_kda_chunk_fallback")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, cfg.vocab_size, (B, T), device="cuda")
    print("eval", round(model(input_ids=ids, labels=ids).loss.item(), 3))
report("no_grad_eval")

del opt
prompts = torch.randint(3, cfg.vocab_size, (2, 512), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=32,
        min_new_tokens=32,
        pad_token_id=0,
        eos_token_id=None,
    )
print("generated", tuple(gen.shape))
report("generate_hybrid_cache")
