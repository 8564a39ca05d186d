"""HF SwitchTransformersForConditionalGeneration from a SwitchTransformersConfig (switch-base-8
sizes: 768 wide, 12+12 layers, a sparse MLP of 8 experts with top-1 routing and expert capacity
every other layer, the router's z-loss and auxiliary loss), span-corruption style training on 512
input and 128 target tokens at batch 8, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import SwitchTransformersConfig, SwitchTransformersForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6504)
if SMALL:
    config = SwitchTransformersConfig(
        vocab_size=100,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        num_experts=4,
        expert_capacity=8,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    B, S, T = 2, 16, 8
else:
    config = SwitchTransformersConfig(
        vocab_size=32128, num_experts=8, expert_capacity=64, decoder_start_token_id=0, pad_token_id=0
    )
    B, S, T = 8, 512, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SwitchTransformersForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    labels = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
