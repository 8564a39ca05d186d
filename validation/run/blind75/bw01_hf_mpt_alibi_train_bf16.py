"""HF MptForCausalLM (MPT-style: ALiBi attention biases, no positional embeddings, no biases, a
tied LM head) built from its config, 24 layers, 2,048 wide, fp32 weights under bf16 autocast,
AdamW, batch 2 of 2,048 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import MptConfig, MptForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7501)
if SMALL:
    config = MptConfig(d_model=32, n_heads=4, n_layers=2, expansion_ratio=4, max_seq_len=64, vocab_size=128)
    B, L = 2, 16
else:
    config = MptConfig(
        d_model=2048, n_heads=16, n_layers=24, expansion_ratio=4, max_seq_len=2048, vocab_size=50432
    )
    B, L = 2, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MptForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
