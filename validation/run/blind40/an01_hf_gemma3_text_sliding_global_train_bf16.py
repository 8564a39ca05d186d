"""Full fine-tuning of an HF Gemma3ForCausalLM (text only) from config in bf16: five sliding-window
layers (window 512) for each global one, sdpa attention, query-key norms, tied embeddings of a
262k vocabulary, AdamW (foreach), 1152 wide, 12 layers, batch 2 at 1024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4001)
if SMALL:
    config = Gemma3TextConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=8,
    )
    B, S = 2, 16
else:
    config = Gemma3TextConfig(
        vocab_size=262144,
        hidden_size=1152,
        intermediate_size=6912,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=512,
    )
    B, S = 2, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Gemma3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
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
