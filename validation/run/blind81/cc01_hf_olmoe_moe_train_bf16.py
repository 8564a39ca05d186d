"""HF OlmoeForCausalLM (OLMoE: 16 experts, top-4 routing, q/k RMSNorm, the router's load-balancing
auxiliary loss) built from its config, 8 layers, 1,024 wide, bf16 weights, AdamW, batch 4 of 512
tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import OlmoeConfig, OlmoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8101)
if SMALL:
    config = OlmoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
        pad_token_id=0,
        eos_token_id=1,
    )
    B, L = 2, 16
else:
    config = OlmoeConfig(
        vocab_size=50304,
        hidden_size=1024,
        intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        num_experts=16,
        num_experts_per_tok=4,
        output_router_logits=True,
        pad_token_id=0,
    )
    B, L = 4, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = OlmoeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    aux = out.aux_loss.item()
    del ids, out
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"step {step} aux {aux:.3f} peak {peak} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()
