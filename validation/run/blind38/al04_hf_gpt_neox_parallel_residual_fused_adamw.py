"""Full fine-tuning of an HF GPTNeoXForCausalLM (Pythia-style: parallel residual, rotary on a
quarter of each head) from config in bf16, sdpa attention, AdamW(fused=True), 1024 wide, 12 layers,
16 heads, batch 8 at 1024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3804)
if SMALL:
    config = GPTNeoXConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        rotary_pct=0.25,
    )
    B, S = 2, 16
else:
    config = GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        rotary_pct=0.25,
    )
    B, S = 8, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTNeoXForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
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
