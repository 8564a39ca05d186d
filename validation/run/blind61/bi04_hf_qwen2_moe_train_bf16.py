"""HF Qwen2MoeForCausalLM from a Qwen2MoeConfig (1,024 wide, 8 layers, 16 routed experts of width
704 with top-4 routing plus a gated shared expert, the router's auxiliary loss), bf16 weights,
trained at batch 4 of 512 tokens with AdamW(fused=True), 2 steps; 3 phases."""

import os

import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6104)
if SMALL:
    config = Qwen2MoeConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
    )
    B, L = 2, 16
else:
    config = Qwen2MoeConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=704,
        shared_expert_intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        num_experts=16,
        num_experts_per_tok=4,
        output_router_logits=True,
    )
    B, L = 4, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2MoeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
