"""HF RecurrentGemmaForCausalLM (Griffin: RG-LRU recurrent blocks with a temporal conv1d, every third
block local sliding-window attention, logits soft-capping) built from its config, 12 layers, 1,536
wide, bf16 weights, AdamW, batch 4 of 1,024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7705)
if SMALL:
    config = RecurrentGemmaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        lru_width=32,
        attention_window_size=8,
        conv1d_width=4,
    )
    B, L = 2, 16
else:
    config = RecurrentGemmaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4608,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=1,
        lru_width=1536,
        attention_window_size=512,
        conv1d_width=4,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = RecurrentGemmaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
