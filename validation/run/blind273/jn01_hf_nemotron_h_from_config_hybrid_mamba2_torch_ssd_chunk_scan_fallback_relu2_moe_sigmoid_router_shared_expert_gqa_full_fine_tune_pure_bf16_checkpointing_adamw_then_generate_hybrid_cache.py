"""A Nemotron-H hybrid decoder (transformers 5.17's `NemotronHForCausalLM`, the Nemotron 3 Nano layout) built
from config: 20 layers of d 2,048 -- 9 Mamba-2 mixers (64 heads of 64, 8 groups, state 128, chunk 128, the
depthwise causal conv of 4) on transformers' torch paths (the GPU machine has no mamba_ssm, causal-conv1d
or `kernels`: `mamba2_split_conv1d_scan_combined` returns None, then the torch conv fallback and the torch
SSD chunk scan), 9 mixture-of-experts blocks (24 non-gated relu^2 experts of 1,024, top-4 by a sigmoid
router with a score-correction bias, a shared relu^2 expert of 2,048, transformers' default grouped_mm
experts) and 2 GQA attention layers (16 query / 2 KV heads of 128, SDPA, no RoPE), vocabulary 65,536,
untied head. Pure bf16 weights, full fine-tune with non-reentrant gradient checkpointing: 4 AdamW steps of
batch 2 x 1,024 with gradient clipping (the torch SSD path materialises (batch, chunks, 128, 128, heads,
head_dim) fp32 products); a no_grad evaluation of 2 batches; then `generate()` (greedy, the hybrid
conv/SSM-state + KV cache, min_new_tokens == max_new_tokens == 32) for 4 prompts of 256 tokens. Seeded, no
value-dependent sizes. 4 phases."""

import torch
from transformers import NemotronHConfig, NemotronHForCausalLM

torch.manual_seed(2731)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


M, E, A = "linear_attention", "moe", "full_attention"
layer_types = [M, E, M, E, M, A, E, M, E, M, E, M, E, M, A, E, M, E, M, E]
cfg = NemotronHConfig(
    vocab_size=65536,
    hidden_size=2048,
    layers_block_type=layer_types,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=128,
    max_position_embeddings=4096,
    mamba_num_heads=64,
    mamba_head_dim=64,
    n_groups=8,
    ssm_state_size=128,
    conv_kernel=4,
    expand=2,
    chunk_size=128,
    n_routed_experts=24,
    num_experts_per_tok=4,
    moe_intermediate_size=1024,
    moe_shared_expert_intermediate_size=2048,
    intermediate_size=4096,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=2.5,
    tie_word_embeddings=False,
    use_cache=True,
)
model = NemotronHForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1)
report("nemotron_h_built_bf16")

model.train()
for step in range(4):
    ids = torch.randint(3, cfg.vocab_size, (2, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("full_fine_tune")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(3, cfg.vocab_size, (2, 1024), device="cuda")
        print("eval", round(model(input_ids=ids, labels=ids, use_cache=False).loss.item(), 3))
report("no_grad_eval")

del opt, loss
prompts = torch.randint(3, cfg.vocab_size, (4, 256), device="cuda")
out = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=32,
    min_new_tokens=32,
    do_sample=False,
    pad_token_id=0,
)
print("generated", tuple(out.shape))
report("generate_hybrid_cache")
