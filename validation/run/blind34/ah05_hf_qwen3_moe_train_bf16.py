"""Fine-tuning a mixture-of-experts model as users do with HF: a Qwen3MoeForCausalLM from config
(1024 wide, 8 layers, 16 heads with 4 KV heads, 16 experts of 512 wide, top-4 routing with
normalised weights, router auxiliary loss on) in bf16, labels = inputs, sdpa attention, batch 4 at
1024 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3405)
if SMALL:
    config = Qwen3MoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
    )
    B, S = 2, 16
else:
    config = Qwen3MoeConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        num_experts=16,
        num_experts_per_tok=4,
    )
    B, S = 4, 1024
config.norm_topk_prob = True
config.output_router_logits = True
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen3MoeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
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
