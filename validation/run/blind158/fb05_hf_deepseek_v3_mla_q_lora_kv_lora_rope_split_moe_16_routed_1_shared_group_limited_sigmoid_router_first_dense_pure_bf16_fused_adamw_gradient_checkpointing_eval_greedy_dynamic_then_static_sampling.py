"""HF DeepseekV3ForCausalLM from a small DeepseekV3Config (1,024 wide, 6 layers, the first dense
(SwiGLU 2,816) and the rest MoE: 16 routed experts of intermediate 512 plus 1 shared, 4 active per
token through the sigmoid router with group-limited selection (4 groups, top 2 groups) and the
score-correction bias; multi-head latent attention with 16 heads, q_lora_rank 384, kv_lora_rank
256, a 64-dim no-rope and 32-dim rope split of the query/key head, value head 64; the 129,280-token
vocabulary untied), the whole model in bf16 with fused AdamW (weight decay 0.1, betas 0.9/0.95) and
gradient checkpointing (use_reentrant=False), labels=input_ids, batch 8 x 512, 2 steps each its own
phase; an eval loss at 8 x 512 under no_grad; then generate(): greedy with the default dynamic
cache for 8 prompts of 256 and 64 new tokens, then sampling (temperature 0.6, top-p 0.95) with
cache_implementation="static" (compile disabled) for 4 prompts of 128, 32 new tokens; 5 phases."""

import os

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15805)
if SMALL:
    config = DeepseekV3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
    )
    B, T, GB, GP, GN, SB, SP, SN = 2, 32, 2, 16, 4, 2, 8, 4
else:
    config = DeepseekV3Config(
        vocab_size=129280,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=512,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_routed_experts=16,
        n_shared_experts=1,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        q_lora_rank=384,
        kv_lora_rank=256,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    B, T, GB, GP, GN, SB, SP, SN = 8, 512, 8, 256, 64, 4, 128, 32
device = "cuda" if torch.cuda.is_available() else "cpu"

model = DeepseekV3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(
    model.parameters(), lr=2.2e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

model.eval()
with torch.no_grad():
    input_ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    val = model(input_ids=input_ids, labels=input_ids).loss.item()
if device == "cuda":
    print(f"val {val:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.gradient_checkpointing_disable()
prompts = torch.randint(0, config.vocab_size, (GB, GP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=GN,
        min_new_tokens=GN,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del gen
prompts = torch.randint(0, config.vocab_size, (SB, SP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=SN,
        min_new_tokens=SN,
        do_sample=True,
        temperature=0.6,
        top_p=0.95,
        cache_implementation="static",
        disable_compile=True,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"sampled static {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
