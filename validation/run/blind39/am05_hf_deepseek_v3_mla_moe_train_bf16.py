"""Full fine-tuning of an HF DeepseekV3ForCausalLM from config (multi-head latent attention,
routed experts with a shared expert after one dense layer) in bf16, sdpa attention, AdamW
(foreach), 1024 wide, 4 layers, 16 heads, 16 routed experts of which 4 per token, batch 4 at 1024
tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3905)
common = dict(first_k_dense_replace=1, n_group=1, topk_group=1, num_experts_per_tok=4, norm_topk_prob=True)
if SMALL:
    config = DeepseekV3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=8,
        n_shared_experts=1,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
        **common,
    )
    B, S = 2, 16
else:
    config = DeepseekV3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_routed_experts=16,
        n_shared_experts=1,
        q_lora_rank=384,
        kv_lora_rank=256,
        qk_nope_head_dim=64,
        qk_rope_head_dim=32,
        v_head_dim=64,
        **common,
    )
    B, S = 4, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DeepseekV3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
